//! systemd service notifications for `Type=notify` units: readiness once a
//! daemon really serves, watchdog keep-alives while its runtime is responsive,
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
    let period = watchdog_period()?;
    tracing::info!(period_ms = period.as_millis() as u64, "systemd watchdog on");
    Some(Watchdog(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            send(NotifyState::Watchdog, "WATCHDOG=1");
        }
    })))
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
