//! One socket looked up by its four addresses with the kernel's `sock_diag` netlink interface
//! (`inet_diag_req_v2` with an exact id, not a dump): microseconds, where reading
//! `/proc/net/tcp` walks every TCP socket.

use rustix::net::netlink::{SocketAddrNetlink, SOCK_DIAG};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IPPROTO_TCP: u8 = 6;
const HEADER: usize = 16;
const REQUEST: usize = 56;

/// Why the kernel told nothing of a socket.
#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    /// The netlink socket could not be opened or asked.
    #[error("sock_diag: {0}")]
    Io(#[from] rustix::io::Errno),
    /// The kernel answered nothing.
    #[error("sock_diag answered nothing")]
    Empty,
    /// The kernel knows no such socket.
    #[error("sock_diag found no such socket")]
    NotFound,
}

/// The owner's uid and the inode of the socket from `src` to `dst`.
pub fn inode(src: SocketAddr, dst: SocketAddr) -> Result<(u32, u64), DiagError> {
    let v4 = matches!((src.ip(), dst.ip()), (IpAddr::V4(_), IpAddr::V4(_)));
    let family = match v4 {
        true => AddressFamily::INET,
        false => AddressFamily::INET6,
    };
    let addr = |a: SocketAddr| -> [u8; 16] {
        let mut out = [0u8; 16];
        match a.ip() {
            IpAddr::V4(ip) if v4 => out[..4].copy_from_slice(&ip.octets()),
            IpAddr::V4(ip) => out = ip.to_ipv6_mapped().octets(),
            IpAddr::V6(ip) => out = ip.octets(),
        }
        out
    };
    let mut msg = [0u8; HEADER + REQUEST];
    msg[0..4].copy_from_slice(&((HEADER + REQUEST) as u32).to_ne_bytes());
    msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    let r = &mut msg[HEADER..];
    r[0] = family.as_raw() as u8;
    r[1] = IPPROTO_TCP;
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    r[8..10].copy_from_slice(&src.port().to_be_bytes());
    r[10..12].copy_from_slice(&dst.port().to_be_bytes());
    r[12..28].copy_from_slice(&addr(src));
    r[28..44].copy_from_slice(&addr(dst));
    r[48..56].copy_from_slice(&[0xff; 8]); // no cookie

    // One socket per thread, kept: opening one per connection costs as much as the question.
    // Each question is answered before the next is asked, and a socket that failed midway is
    // closed, so no answer is ever read for another question.
    thread_local! {
        static SOCKET: std::cell::RefCell<Option<OwnedFd>> = const { std::cell::RefCell::new(None) };
    }
    let mut buf = [0u8; 512];
    let got = SOCKET.with(|cell| {
        let mut cell = cell.borrow_mut();
        let socket = match cell.take() {
            Some(socket) => socket,
            None => rustix::net::socket_with(
                AddressFamily::NETLINK,
                SocketType::DGRAM,
                SocketFlags::CLOEXEC,
                Some(SOCK_DIAG),
            )?,
        };
        rustix::net::sendto(
            &socket,
            &msg,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        let (got, _) = rustix::net::recv(&socket, &mut buf, RecvFlags::empty())?;
        *cell = Some(socket);
        Ok::<usize, DiagError>(got)
    })?;
    if got < HEADER {
        return Err(DiagError::Empty);
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY || got < HEADER + 72 {
        return Err(DiagError::NotFound);
    }
    let m = &buf[HEADER..];
    let uid = u32::from_ne_bytes([m[64], m[65], m[66], m[67]]);
    let inode = u32::from_ne_bytes([m[68], m[69], m[70], m[71]]);
    Ok((uid, inode as u64))
}
