//! The kernel's netem for a WAN scenario, where the kernel has `sch_netem`
//! (real testbeds; this machine's kernel lacks it, see `detect`): each path
//! gets a network namespace `tmn<k>` joined to this one by a veth pair,
//! `10.78.<k>.1` on this side and `10.78.<k>.2` in the namespace. The path's
//! `up` impairment is netem on the namespace's end, its `down` on this end,
//! and outages and flaps switch both to 100 % loss while they last, by the
//! same [`Outages`] rule the relay uses. An edge started in the namespace
//! reaches a coordinator listening on `10.78.<k>.1` (or `0.0.0.0`) through
//! the kernel's impairment instead of the relay's.

use std::time::{Duration, Instant};

use super::impair::{Outages, gilbert_elliott_runs};
use super::netns::{CommandFailed, run as run_command};
use super::scenario::{Impairment, PathSpec};

/// The MTU the queue limit is counted in: netem limits its queue in packets.
const MTU_BYTES: u64 = 1500;

/// Why netem could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetemError {
    /// The kernel has no netem qdisc.
    #[error(
        "this kernel has no sch_netem (CONFIG_NET_SCH_NETEM is not set, or the module is not loaded: try `modprobe sch_netem`); \
         use the userspace relay instead: run the same command without --netem"
    )]
    Missing,
    /// A command failed.
    #[error("{0}; netem needs root and iproute2 (ip, tc)")]
    Command(CommandFailed),
}

/// The `netem` arguments of `tc qdisc add dev D root netem ...` for one
/// direction; `down` replaces every loss with 100 %, for an outage.
///
/// Delay and jitter in ms (netem's jitter is uniform, as the relay's); loss
/// as `random P%`, or, in bursts, `gemodel p% r%` with `p = 1 / good run`
/// and `r = 1 / bad run` from [`gilbert_elliott_runs`]; `duplicate`;
/// `reorder 100% gap N` sends every Nth packet without its delay; the rate
/// in kbit/s with the queue as `limit ⌈queue_bytes / 1500⌉` packets.
pub fn netem_args(imp: &Impairment, down: bool) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "delay".into(),
        format!("{}ms", imp.delay_ms),
        format!("{}ms", imp.jitter_ms),
    ];
    if down {
        args.extend(["loss".into(), "random".into(), "100%".into()]);
    } else if imp.loss > 0.0 && imp.loss_burst > 1.0 {
        let (good, bad) = gilbert_elliott_runs(imp.loss, imp.loss_burst);
        args.extend([
            "loss".into(),
            "gemodel".into(),
            percent(1.0 / good),
            percent(1.0 / bad),
        ]);
    } else if imp.loss > 0.0 {
        args.extend(["loss".into(), "random".into(), percent(imp.loss)]);
    }
    if imp.duplicate > 0.0 {
        args.extend(["duplicate".into(), percent(imp.duplicate)]);
    }
    if imp.reorder_every >= 2 {
        args.extend([
            "reorder".into(),
            "100%".into(),
            "gap".into(),
            imp.reorder_every.to_string(),
        ]);
    }
    if let (Some(rate), Some(queue)) = (imp.rate_mbps, imp.queue_bytes()) {
        args.extend([
            "rate".into(),
            format!("{}kbit", (rate * 1000.0).round()),
            "limit".into(),
            queue.div_ceil(MTU_BYTES).to_string(),
        ]);
    }
    args
}

/// A fraction as netem writes a percentage, e.g. 0.01 as `1%`.
fn percent(fraction: f64) -> String {
    format!("{}%", (fraction * 100.0 * 1e6).round() / 1e6)
}

/// The device names and addresses of path `k`: (this side's veth, the
/// namespace's veth, the namespace, this side's address, the namespace's).
pub fn names(k: usize) -> (String, String, String, String, String) {
    (
        format!("tmn{k}a"),
        format!("tmn{k}b"),
        format!("tmn{k}"),
        format!("10.78.{k}.1"),
        format!("10.78.{k}.2"),
    )
}

/// The paths of a scenario set up with netem; dropping it removes them.
pub struct NetemPaths {
    paths: Vec<(PathSpec, Outages)>,
    down: Vec<bool>,
}

impl NetemPaths {
    /// Creates a namespace and veth pair per path and applies its impairment.
    /// Returns [`NetemError::Missing`] where the kernel has no netem.
    pub fn create(specs: &[PathSpec]) -> Result<NetemPaths, NetemError> {
        let mut made = NetemPaths {
            paths: Vec::new(),
            down: Vec::new(),
        };
        for (k, spec) in specs.iter().enumerate() {
            let (here, there, ns, here_ip, there_ip) = names(k);
            ip(&["netns", "add", &ns])?;
            made.paths.push((
                spec.clone(),
                Outages::new(spec.outage.clone(), spec.flap.clone()),
            ));
            made.down.push(false);
            ip(&["link", "add", &here, "type", "veth", "peer", "name", &there])?;
            ip(&["link", "set", &there, "netns", &ns])?;
            ip(&["addr", "add", &format!("{here_ip}/30"), "dev", &here])?;
            ip(&["link", "set", &here, "up"])?;
            let there_cidr = format!("{there_ip}/30");
            ip(&["-n", &ns, "addr", "add", &there_cidr, "dev", &there])?;
            ip(&["-n", &ns, "link", "set", &there, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            qdisc(None, &here, "add", &netem_args(&spec.down, false))?;
            qdisc(Some(&ns), &there, "add", &netem_args(&spec.up, false))?;
            tracing::info!(
                path = %spec.name, netns = %ns, here = %here_ip, there = %there_ip,
                up = %spec.up, down = %spec.down, "netem path ready"
            );
        }
        Ok(made)
    }

    /// Applies outages and flaps `t` after the start: a path going down
    /// loses everything both ways until it comes back.
    pub fn apply_outages(&mut self, t: Duration) -> Result<(), NetemError> {
        for (k, (spec, outages)) in self.paths.iter().enumerate() {
            let down = outages.is_down(t);
            if down == self.down[k] {
                continue;
            }
            let (here, there, ns, ..) = names(k);
            qdisc(None, &here, "change", &netem_args(&spec.down, down))?;
            qdisc(Some(&ns), &there, "change", &netem_args(&spec.up, down))?;
            self.down[k] = down;
            tracing::info!(path = %spec.name, down, "netem outage");
        }
        Ok(())
    }

    /// Keeps the outages up to date, checking every 100 ms, until SIGINT or
    /// SIGTERM.
    pub async fn run_until_stopped(&mut self) -> Result<(), NetemError> {
        let start = Instant::now();
        let stop = tidemill_runtime::lifecycle::shutdown_signal();
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                () = &mut stop => return Ok(()),
                _ = tick.tick() => self.apply_outages(start.elapsed())?,
            }
        }
    }
}

impl Drop for NetemPaths {
    fn drop(&mut self) {
        for k in 0..self.paths.len() {
            let (here, _, ns, ..) = names(k);
            for (program, args) in [
                ("ip", vec!["link", "delete", here.as_str()]),
                ("ip", vec!["netns", "delete", ns.as_str()]),
            ] {
                if let Err(e) = run_command(program, &args) {
                    tracing::warn!(error = %e, "cannot remove a netem path");
                }
            }
        }
    }
}

/// Runs `ip` with `args`.
fn ip(args: &[&str]) -> Result<(), NetemError> {
    run_command("ip", args).map_err(NetemError::Command)
}

/// `tc qdisc VERB dev DEV root netem ARGS`, in namespace `ns` if given.
fn qdisc(ns: Option<&str>, dev: &str, verb: &str, netem: &[String]) -> Result<(), NetemError> {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["qdisc", verb, "dev", dev, "root", "netem"]);
    args.extend(netem.iter().map(String::as_str));
    run_command("tc", &args).map_err(|e| {
        if is_missing(&e.message) {
            NetemError::Missing
        } else {
            NetemError::Command(e)
        }
    })
}

/// Whether `tc`'s error says the kernel lacks the netem qdisc.
pub fn is_missing(tc_stderr: &str) -> bool {
    let s = tc_stderr.to_ascii_lowercase();
    s.contains("specified qdisc kind is unknown") || s.contains("unknown qdisc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rural_lte_up_as_netem_arguments() {
        // configs/wan/rural-lte.toml's up direction: 40 ± 10 ms, 1 % loss in
        // bursts of 2, 5 Mb/s with the default queue of
        // max(65 536, 5e6 / 8 · 0.150) = 93 750 B = 63 packets of 1 500 B.
        let file =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/wan/rural-lte.toml");
        let scenario = crate::wan::scenario::Scenario::load(&file).unwrap();
        let up = &scenario.path[0].up;
        // Gilbert-Elliott runs (198, 2): p = 1/198 = 0.505051 %, r = 1/2 = 50 %.
        assert_eq!(
            netem_args(up, false).join(" "),
            "delay 40ms 10ms loss gemodel 0.505051% 50% rate 5000kbit limit 63"
        );
        assert_eq!(
            netem_args(up, true).join(" "),
            "delay 40ms 10ms loss random 100% rate 5000kbit limit 63"
        );
    }

    #[test]
    fn independent_loss_duplication_and_reordering() {
        let imp = Impairment {
            delay_ms: 300.0,
            loss: 0.005,
            duplicate: 0.001,
            reorder_every: 5,
            ..Impairment::default()
        };
        assert_eq!(
            netem_args(&imp, false).join(" "),
            "delay 300ms 0ms loss random 0.5% duplicate 0.1% reorder 100% gap 5"
        );
        assert_eq!(
            netem_args(&Impairment::default(), false).join(" "),
            "delay 0ms 0ms"
        );
    }

    #[test]
    fn tc_without_netem_is_recognised() {
        assert!(is_missing("Error: Specified qdisc kind is unknown.\n"));
        assert!(!is_missing("RTNETLINK answers: Operation not permitted"));
    }
}
