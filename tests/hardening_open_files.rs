//! The open-file limit is raised at start: the `slidegate` binary started with a lowered soft
//! limit runs with its soft limit at the hard limit.

mod support;

use support::gateway::config;
use support::hardening::{ALL, MEMORY};

/// The soft limit of open files in `/proc/PID/limits`.
fn soft_open_files(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn the_binary_raises_its_open_file_soft_limit_to_the_hard_limit() {
    use std::os::unix::process::CommandExt;

    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    const LOWERED: u64 = 256;
    assert!(
        hard.rlim_max > LOWERED,
        "the hard limit ({}) leaves no room to raise a lowered soft limit",
        hard.rlim_max
    );
    let hard = hard.rlim_max;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        config(
            MEMORY,
            &format!("http://127.0.0.1:{}", support::free_port()),
            ALL,
        ),
    )
    .unwrap();
    let mut cmd = support::process::command(&path, &[]);
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let lowered = libc::rlimit {
                rlim_cur: LOWERED as libc::rlim_t,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let process = support::process::Process::spawn(cmd);
    process.listening();
    assert_eq!(
        soft_open_files(process.pid()),
        hard,
        "started with a soft limit of {LOWERED}, it runs with the hard limit"
    );
}
