//! A network namespace of a task's own (`[tasks] network = "private"`):
//! made in the child between fork and exec, holding only a loopback
//! interface, brought up, that no other process shares. The task cannot
//! reach the host's 127.0.0.1 (the coordinator's API, other tasks) nor any
//! other network.

/// Moves the calling process into a new network namespace and brings its
/// loopback up. Runs between fork and exec: only async-signal-safe system
/// calls (unshare, socket, ioctl, close), no allocation.
pub fn enter_private() -> std::io::Result<()> {
    // SAFETY: plain system calls on values owned here; `req` is a zeroed
    // `ifreq` the kernel reads and writes within its size.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let up = if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(sock, libc::SIOCSIFFLAGS, &req)
        } else {
            -1
        };
        let err = std::io::Error::last_os_error();
        libc::close(sock);
        if up != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Whether this host lets the daemon give tasks their own network
/// namespace: a child tries it (with its loopback) and exits.
pub fn available() -> Result<(), std::io::Error> {
    use std::os::unix::process::CommandExt;
    let mut probe = std::process::Command::new("/bin/sh");
    probe
        .args(["-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: enter_private is async-signal-safe (see there).
    unsafe {
        probe.pre_exec(enter_private);
    }
    let status = probe.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the probe exited with {status}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_task_cannot_reach_the_hosts_loopback() {
        if available().is_err() {
            return;
        }
        use std::os::unix::process::CommandExt;
        let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = host.local_addr().unwrap().port();
        // Inside, the host's listener is out of reach.
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached || echo refused");
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["-c", &script]);
        // SAFETY: enter_private is async-signal-safe.
        unsafe {
            cmd.pre_exec(enter_private);
        }
        let out = cmd.output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.trim(), "refused");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            "outside, it is"
        );
    }
}
