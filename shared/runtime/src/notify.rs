//! systemd service notifications for `Type=notify` units: readiness once a
//! daemon really serves, watchdog keep-alives while its runtime is responsive
//! (and, where the daemon says so, its own work goes on),
//! and the start of a stop. Without `NOTIFY_SOCKET` (not under systemd) every
//! call sends nothing.

use std::time::Duration;

use sd_notify::NotifyState;

/// Whether a service manager listens: `NOTIFY_SOCKET` is set.
fn supervised() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

fn send(state: NotifyState<'_>, what: &str) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!(error = %e, notification = what, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Tells the service manager the daemon is serving (`READY=1`): call it once
/// listeners are bound and state is recovered, so `systemctl start` and units
/// ordered after this one wait for a usable daemon.
pub fn ready() {
    send(NotifyState::Ready, "READY=1");
}

/// Tells the service manager the daemon has begun to stop (`STOPPING=1`), so
/// the time it takes to wind tasks down is not mistaken for a hang.
pub fn stopping() {
    send(NotifyState::Stopping, "STOPPING=1");
}

/// The keep-alive period asked for by `WATCHDOG_USEC`: half of it, as
/// sd_watchdog_enabled(3) advises; `None` without a watchdog or a listener.
pub fn watchdog_period() -> Option<Duration> {
    if !supervised() {
        return None;
    }
    sd_notify::watchdog_enabled()
        .filter(|d| !d.is_zero())
        .map(|d| d / 2)
}

/// Sends `WATCHDOG=1` every [`watchdog_period`] from a task on the current
/// tokio runtime until the returned guard drops, so a runtime that stops
/// making progress (a blocked thread, a deadlock) stops the keep-alives and
/// systemd restarts the daemon. Returns `None`, and starts nothing, without a
/// watchdog.
pub fn start_watchdog() -> Option<Watchdog> {
    start_watchdog_while(|| Ok(()))
}

/// [`start_watchdog`], sending each keep-alive only while `healthy` says the
/// daemon's own work goes on (`Err` says why not), so that a loop that stalls
/// while the runtime still runs also gets the daemon restarted.
pub fn start_watchdog_while(
    healthy: impl Fn() -> Result<(), String> + Send + 'static,
) -> Option<Watchdog> {
    let period = watchdog_period()?;
    tracing::info!(period_ms = period.as_millis() as u64, "systemd watchdog on");
    Some(Watchdog(tokio::spawn(keep_alive(period, healthy, || {
        send(NotifyState::Watchdog, "WATCHDOG=1")
    }))))
}

/// Every `period`, calls `ping` if `healthy`; logs once when it stops
/// because the daemon is not, and once when it is again.
async fn keep_alive(period: Duration, healthy: impl Fn() -> Result<(), String>, ping: impl Fn()) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut withheld = false;
    loop {
        tick.tick().await;
        match healthy() {
            Ok(()) => {
                if std::mem::take(&mut withheld) {
                    tracing::info!("the daemon's work goes on again; watchdog keep-alives resume");
                }
                ping();
            }
            Err(why) if !withheld => {
                withheld = true;
                tracing::error!(%why, "withholding the systemd watchdog keep-alive, so that systemd restarts the daemon");
            }
            Err(_) => {}
        }
    }
}

/// The running keep-alive task; dropping it stops the keep-alives, so none
/// outlives the daemon's main loop.
#[derive(Debug)]
pub struct Watchdog(tokio::task::JoinHandle<()>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keep_alives_stop_while_the_daemon_is_unhealthy_and_resume() {
        let healthy = Arc::new(AtomicBool::new(true));
        let pings = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(keep_alive(
            Duration::from_secs(15),
            {
                let healthy = healthy.clone();
                move || {
                    if healthy.load(Ordering::SeqCst) {
                        Ok(())
                    } else {
                        Err("no sample for 40 s".into())
                    }
                }
            },
            {
                let pings = pings.clone();
                move || {
                    pings.fetch_add(1, Ordering::SeqCst);
                }
            },
        ));
        // Ticks at 0, 15 and 30 s.
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert_eq!(pings.load(Ordering::SeqCst), 3);
        healthy.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(pings.load(Ordering::SeqCst), 3, "none while unhealthy");
        healthy.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(pings.load(Ordering::SeqCst), 4);
        task.abort();
    }
}
