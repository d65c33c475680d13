//! A WAN lab in network namespaces, for traffic the UDP relay cannot carry
//! (TCP, as a training job's all-reduce uses): each node gets a TUN device with
//! its own address, in a namespace of its own or in this one, and [`super::hub`]
//! moves IP packets between the devices through the same impairment model the
//! relay uses. It is this kernel's stand-in for netem on veth pairs; it needs
//! root (`CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and the `ip` tool.
//!
//! The namespaces are deleted when the [`Lab`] is dropped, or by the next lab
//! of the same name when a killed process left them; a TUN device goes with
//! its file descriptor.

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

use super::hub::Hub;
use super::scenario::Impairment;

/// `TUNSETIFF`, `_IOW('T', 202, int)`: attach the descriptor to a named device.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Why a lab could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// `/dev/net/tun` could not be opened or configured.
    #[error(
        "cannot create TUN device {device}: {source}; run as root on a kernel with /dev/net/tun"
    )]
    Tun {
        /// The device name.
        device: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An `ip` command failed.
    #[error("{0}; the lab needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2")]
    Ip(CommandFailed),
    /// The hub's runtime could not start, or not watch the devices.
    #[error("cannot start the hub that joins the lab's nodes: {0}")]
    Hub(std::io::Error),
    /// A node name is unusable as part of a device or namespace name.
    #[error(
        "node name {0:?}: use 1 to 8 ASCII letters, digits or '-', so that device names stay under 16 bytes"
    )]
    BadName(String),
}

/// Why a lab cannot be set up on this host, if it cannot: it needs root
/// (network namespaces need `CAP_SYS_ADMIN`) and `/dev/net/tun`.
pub fn unavailable() -> Option<&'static str> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|uids| uids.split_whitespace().nth(1) == Some("0"));
    if !root {
        Some("not root: network namespaces need CAP_SYS_ADMIN")
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("no /dev/net/tun")
    } else {
        None
    }
}

/// One node of a lab: where its processes run and the address they have.
#[derive(Debug, Clone)]
pub struct LabNode {
    /// The node's name.
    pub name: String,
    /// Its namespace; `None` for a node in the caller's own namespace.
    pub netns: Option<String>,
    /// Its address on the lab's /24.
    pub ip: Ipv4Addr,
}

/// Namespaces and TUN devices, one per node, on `10.77.<subnet>.0/24`.
pub struct Lab {
    nodes: Vec<LabNode>,
    tuns: Vec<File>,
}

impl Lab {
    /// Creates one TUN device per node, named `<tag>-<node>`, with address
    /// `10.77.<subnet>.<i + 1>` for the `i`th node. A node whose flag is true
    /// gets the namespace `<tag>-<node>`; the others stay in this one (a
    /// coordinator, say, that the tests' client commands reach on loopback).
    pub fn create(tag: &str, subnet: u8, nodes: &[(&str, bool)]) -> Result<Lab, LabError> {
        let mut lab = Lab {
            nodes: Vec::new(),
            tuns: Vec::new(),
        };
        for (i, (name, own_ns)) in nodes.iter().enumerate() {
            let ok = !name.is_empty()
                && name.len() <= 8
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !ok || tag.len() > 6 {
                return Err(LabError::BadName(format!("{tag}-{name}")));
            }
            let device = format!("{tag}-{name}");
            let ip = Ipv4Addr::new(10, 77, subnet, i as u8 + 1);
            let tun = open_tun(&device)?;
            let netns = own_ns.then(|| device.clone());
            lab.nodes.push(LabNode {
                name: (*name).to_string(),
                netns: netns.clone(),
                ip,
            });
            lab.tuns.push(tun);
            let cidr = format!("{ip}/24");
            match &netns {
                Some(ns) => {
                    remove_stale(ns)?;
                    ip_cmd(&["netns", "add", ns])?;
                    ip_cmd(&["link", "set", &device, "netns", ns])?;
                    ip_cmd(&["-n", ns, "addr", "add", &cidr, "dev", &device])?;
                    ip_cmd(&["-n", ns, "link", "set", &device, "up"])?;
                    ip_cmd(&["-n", ns, "link", "set", "lo", "up"])?;
                }
                None => {
                    ip_cmd(&["addr", "add", &cidr, "dev", &device])?;
                    ip_cmd(&["link", "set", &device, "up"])?;
                }
            }
        }
        Ok(lab)
    }

    /// The nodes, in the order given.
    pub fn nodes(&self) -> &[LabNode] {
        &self.nodes
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&LabNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// A command that runs `program` inside node `name`'s namespace (or here,
    /// for a node without one).
    pub fn command(&self, name: &str, program: &std::path::Path) -> Command {
        match self.node(name).and_then(|n| n.netns.as_deref()) {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(program);
                cmd
            }
            None => Command::new(program),
        }
    }

    /// Sets the TCP congestion control of every namespaced node (`cubic`,
    /// `bbr`, ...), which each namespace keeps apart from this one's. A
    /// namespace may only take an algorithm the host allows, so one the host
    /// has but does not allow (`net.ipv4.tcp_allowed_congestion_control`)
    /// is added to the host's allowed list first.
    pub fn set_tcp_congestion(&self, algorithm: &str) -> Result<(), LabError> {
        const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
        let allowed = std::fs::read_to_string(ALLOWED).unwrap_or_default();
        if !allowed.split_whitespace().any(|a| a == algorithm) {
            let widened = format!("{} {algorithm}", allowed.trim());
            std::fs::write(ALLOWED, &widened).map_err(|e| {
                LabError::Ip(CommandFailed {
                    command: format!("echo {widened} > {ALLOWED}"),
                    message: e.to_string(),
                })
            })?;
            tracing::info!(algorithm, allowed = %widened, "allowed a TCP congestion control on the host");
        }
        for ns in self.nodes.iter().filter_map(|n| n.netns.as_deref()) {
            let script = format!("echo {algorithm} > /proc/sys/net/ipv4/tcp_congestion_control");
            ip_cmd(&["netns", "exec", ns, "sh", "-c", &script])?;
        }
        Ok(())
    }

    /// Starts the hub that joins the nodes: packets from the `i`th node to the
    /// `j`th pass through `link(i, j)`, seeded from `seed`. The TUN devices
    /// move to the hub, so a lab starts one.
    pub fn start_hub(
        &mut self,
        link: impl Fn(usize, usize) -> Impairment,
        seed: u64,
    ) -> Result<Hub, LabError> {
        let ips = self.nodes.iter().map(|n| n.ip).collect();
        Hub::start(std::mem::take(&mut self.tuns), ips, link, seed).map_err(LabError::Hub)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.nodes.iter().filter_map(|n| n.netns.as_deref()) {
            if let Err(e) = ip_cmd(&["netns", "delete", ns]) {
                tracing::warn!(netns = ns, error = %e, "cannot delete the namespace");
            }
        }
    }
}

/// Deletes namespace `ns` if a lab of the same name left it behind: one whose
/// process was killed before its [`Lab`] was dropped (a test stopped half
/// way, a measurement interrupted). Names are `<tag>-<node>`, owned by the
/// lab that chose the tag, so nothing else holds them.
fn remove_stale(ns: &str) -> Result<(), LabError> {
    if std::path::Path::new("/run/netns").join(ns).exists() {
        tracing::warn!(
            netns = ns,
            "deleting the namespace an earlier lab of this name left behind (its process was killed before it could clean up)"
        );
        ip_cmd(&["netns", "delete", ns])?;
    }
    Ok(())
}

/// Opens a non-blocking TUN device (IP packets, no packet-info header).
fn open_tun(device: &str) -> Result<File, LabError> {
    let err = |source| LabError::Tun {
        device: device.to_string(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(err)?;
    // SAFETY: ifreq is plain old data, so all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(device.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: the descriptor is open and `req` is a valid ifreq that outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) };
    if rc < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(file)
}

/// A command that failed: its command line, and its stderr or why it did
/// not start.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` failed: {message}")]
pub struct CommandFailed {
    /// The command line.
    pub command: String,
    /// Its stderr, or why it did not start.
    pub message: String,
}

/// Runs `program` with `args`; shared with the netem back end.
pub(super) fn run(program: &str, args: &[&str]) -> Result<(), CommandFailed> {
    let fail = |message: String| CommandFailed {
        command: format!("{program} {}", args.join(" ")),
        message,
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Runs `ip` with `args`.
fn ip_cmd(args: &[&str]) -> Result<(), LabError> {
    run("ip", args).map_err(LabError::Ip)
}
