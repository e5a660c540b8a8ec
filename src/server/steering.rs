//! Keeps a port's `SO_REUSEPORT` group to this process's own sockets: a classic BPF program on
//! the group picks which socket takes each new connection, among the first `n` only (this
//! process's workers, which joined first). A socket another process of the same user adds to
//! the group later (an older gateway, a proxy started with `reuseport`) sits past them and is
//! never picked: it takes no connection, where the kernel's own choice (a hash over every
//! socket of the group) would hand it its share without a word.
//!
//! The program is `A = random(); A %= n; return A`: connections spread evenly over the
//! workers, as the kernel's hash does.

use std::io;

/// Steers the connections of the group `socket` belongs to over its first `n` sockets.
#[cfg(target_os = "linux")]
pub fn over_first(socket: &socket2::Socket, n: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;

    let n = u32::try_from(n).map_err(|_| io::Error::other("too many listeners"))?;
    let code = |code: u32| u16::try_from(code).unwrap_or_default();
    let mut program = [
        // A = a random number (an ancillary load, not a packet byte)
        libc::sock_filter {
            code: code(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS),
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32,
        },
        // A %= n
        libc::sock_filter {
            code: code(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K),
            jt: 0,
            jf: 0,
            k: n,
        },
        // the socket at index A takes the connection
        libc::sock_filter {
            code: code(libc::BPF_RET | libc::BPF_A),
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the kernel copies it.
    let done = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::addr_of!(fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Elsewhere the kernel's own choice stands.
#[cfg(not(target_os = "linux"))]
pub fn over_first(_socket: &socket2::Socket, _n: usize) -> io::Result<()> {
    Ok(())
}
