//! Which test a connection belongs to, from the process at its other end (Linux): the
//! socket's inode from `/proc/net/tcp{,6}`, the process holding it among the descendants of
//! the test run (or, for `serve --test-id-env`, among this user's processes), and the test id
//! in that process's environment, which children a test spawns inherit. No exec per test and
//! no variable to set per test: nextest sets `NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME` and
//! `NEXTEST_ATTEMPT` in every test process. Any failure says why, and the caller falls back.

use std::net::SocketAddr;

/// Where a connection's test id is read from.
#[derive(Clone, Debug)]
pub enum IdVars {
    /// nextest's: `NEXTEST_BINARY_ID$NEXTEST_TEST_NAME`, and `NEXTEST_ATTEMPT`.
    Nextest,
    /// One variable of the user's (`serve --test-id-env PYTEST_CURRENT_TEST`), whose value is
    /// the test id (pytest's phase suffix, ` (call)`, left out).
    Named(String),
}

/// A connection's test, as its process's environment names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTest {
    /// The test id.
    pub test: String,
    /// Its attempt, from 1 (always 1 for a named variable).
    pub attempt: u32,
}

/// Processes found holding a connection lately, newest first: a test opens most of its
/// connections from one process, so they are looked at before the whole tree is walked.
const RECENT: usize = 64;

/// Finds the test of a connection's peer process.
#[derive(Clone, Debug)]
pub struct Peers {
    /// Only the descendants of this process are searched; `None`: every process of this user.
    pub within: Option<u32>,
    /// What names the test.
    pub vars: IdVars,
    recent: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<u32>>>,
}

impl Peers {
    /// Searches the descendants of `within` (every process of this user when `None`) for the
    /// test that `vars` names.
    pub fn new(within: Option<u32>, vars: IdVars) -> Peers {
        Peers {
            within,
            vars,
            recent: Default::default(),
        }
    }

    /// Whether this system lets the daemon find a connection's process: Linux with `/proc`.
    pub fn supported() -> bool {
        cfg!(target_os = "linux")
            && std::path::Path::new("/proc/net/tcp").exists()
            && std::fs::read_dir("/proc/self/fd").is_ok()
    }

    /// The test of the process that holds the other end of the connection from `peer` to
    /// `local` (as this daemon sees them).
    pub fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Result<PeerTest, String> {
        #[cfg(target_os = "linux")]
        {
            linux::identify(self, peer, local)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (peer, local);
            Err("finding a connection's process needs Linux".into())
        }
    }
}

/// Reads a test id and attempt from a process's environment block (NUL-separated `K=V`).
fn from_environ(environ: &[u8], vars: &IdVars) -> Option<PeerTest> {
    let get = |name: &str| -> Option<String> {
        environ.split(|b| *b == 0).find_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| v.to_string())
        })
    };
    match vars {
        IdVars::Nextest => {
            let binary = get("NEXTEST_BINARY_ID")?;
            let name = get("NEXTEST_TEST_NAME")?;
            let attempt = get("NEXTEST_ATTEMPT")
                .and_then(|a| a.parse().ok())
                .unwrap_or(1);
            Some(PeerTest {
                test: format!("{binary}${name}"),
                attempt,
            })
        }
        IdVars::Named(var) => {
            let value = get(var)?;
            let test = ["call", "setup", "teardown"]
                .iter()
                .find_map(|phase| value.strip_suffix(&format!(" ({phase})")))
                .unwrap_or(&value)
                .to_string();
            (!test.is_empty()).then_some(PeerTest { test, attempt: 1 })
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{from_environ, PeerTest, Peers};
    use std::collections::VecDeque;
    use std::net::{IpAddr, SocketAddr};
    use std::os::unix::fs::MetadataExt;

    pub fn identify(
        peers: &Peers,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<PeerTest, String> {
        let uid = std::fs::metadata("/proc/self")
            .map_err(|e| format!("/proc/self: {e}"))?
            .uid();
        let inode = socket_inode(peer, local, uid)?;
        let target = format!("socket:[{inode}]");
        let recent: Vec<u32> = peers
            .recent
            .lock()
            .expect("peers lock")
            .iter()
            .copied()
            .collect();
        // A process that holds the socket now is its owner, whatever it was before: a
        // recent one that still does needs no walk of the tree (and no check of its place
        // in it: it was found there, and a process never leaves its ancestors' tree but by
        // their exit, after which the socket would be elsewhere).
        if let Some(found) = find(&recent, &target, uid, peers)? {
            return Ok(found);
        }
        let pids = match peers.within {
            Some(root) => descendants(root),
            None => every_process(),
        };
        if let Some(found) = find(&pids, &target, uid, peers)? {
            return Ok(found);
        }
        Err(format!(
            "no process of the run holds the connection from {peer} (socket {inode})"
        ))
    }

    /// The test of the first of `pids` that holds `target`, noting it as recent.
    fn find(
        pids: &[u32],
        target: &str,
        uid: u32,
        peers: &Peers,
    ) -> Result<Option<PeerTest>, String> {
        for &pid in pids {
            let dir = format!("/proc/{pid}");
            // Same user only: another user's process is none of ours to read. One that is
            // gone leaves the recent list.
            match std::fs::metadata(&dir).map(|m| m.uid()) {
                Ok(owner) if owner == uid => {}
                Ok(_) => continue,
                Err(_) => {
                    peers
                        .recent
                        .lock()
                        .expect("peers lock")
                        .retain(|p| *p != pid);
                    continue;
                }
            }
            let Ok(fds) = std::fs::read_dir(format!("{dir}/fd")) else {
                continue;
            };
            let holds = fds
                .filter_map(Result::ok)
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target));
            if holds {
                let environ = std::fs::read(format!("{dir}/environ"))
                    .map_err(|e| format!("{dir}/environ: {e}"))?;
                let found = from_environ(&environ, &peers.vars).ok_or_else(|| {
                    format!("process {pid} holds the connection but its environment names no test")
                })?;
                let mut recent = peers.recent.lock().expect("peers lock");
                recent.retain(|p| *p != pid);
                recent.push_front(pid);
                recent.truncate(super::RECENT);
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The inode of the socket whose local end is `peer` and remote end `local`, owned by
    /// `uid`: asked of the kernel by its addresses (sock_diag), else read from /proc/net/tcp.
    fn socket_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, String> {
        match diag::inode(peer, local) {
            Ok((owner, inode)) if owner == uid => Ok(inode),
            Ok(_) => Err(format!("the connection from {peer} is another user's")),
            Err(_) => table_inode(peer, local, uid),
        }
    }

    /// The same from `/proc/net/tcp{,6}`, which the kernel makes by walking every TCP socket.
    fn table_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, String> {
        let (table, want_local, want_remote) = match (peer.ip(), local.ip()) {
            (IpAddr::V4(p), IpAddr::V4(l)) => {
                ("/proc/net/tcp", v4(p, peer.port()), v4(l, local.port()))
            }
            (p, l) => ("/proc/net/tcp6", v6(p, peer.port()), v6(l, local.port())),
        };
        let text = std::fs::read_to_string(table).map_err(|e| format!("{table}: {e}"))?;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[1] != want_local || f[2] != want_remote {
                continue;
            }
            if f[7].parse::<u32>().ok() != Some(uid) {
                return Err(format!("the connection from {peer} is another user's"));
            }
            return f[9]
                .parse()
                .map_err(|_| format!("{table}: an inode that is no number"));
        }
        Err(format!("{table} has no socket from {peer} to {local}"))
    }

    /// `/proc/net/tcp`'s form of an IPv4 address and port: the address as a little-endian
    /// word in hex, the port in hex.
    fn v4(ip: std::net::Ipv4Addr, port: u16) -> String {
        format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()))
    }

    /// `/proc/net/tcp6`'s form: four little-endian words.
    fn v6(ip: IpAddr, port: u16) -> String {
        let octets = match ip {
            IpAddr::V6(v6) => v6.octets(),
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        };
        let words: String = octets
            .chunks(4)
            .map(|c| format!("{:08X}", u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        format!("{words}:{port:04X}")
    }

    /// One socket looked up by its four addresses with the kernel's `sock_diag` netlink
    /// interface (`inet_diag_req_v2` with an exact id, not a dump).
    mod diag {
        use std::net::{IpAddr, SocketAddr};

        const SOCK_DIAG_BY_FAMILY: u16 = 20;
        const NLMSG_ERROR: u16 = 2;
        const HEADER: usize = 16;
        const REQUEST: usize = 56;

        /// The owner's uid and the inode of the socket from `src` to `dst`.
        pub fn inode(src: SocketAddr, dst: SocketAddr) -> Result<(u32, u64), String> {
            let family = match (src.ip(), dst.ip()) {
                (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
                _ => libc::AF_INET6,
            };
            let addr = |a: SocketAddr| -> [u8; 16] {
                let mut out = [0u8; 16];
                match a.ip() {
                    IpAddr::V4(v4) if family == libc::AF_INET => {
                        out[..4].copy_from_slice(&v4.octets())
                    }
                    IpAddr::V4(v4) => out = v4.to_ipv6_mapped().octets(),
                    IpAddr::V6(v6) => out = v6.octets(),
                }
                out
            };
            let mut msg = [0u8; HEADER + REQUEST];
            msg[0..4].copy_from_slice(&((HEADER + REQUEST) as u32).to_ne_bytes());
            msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            msg[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
            let r = &mut msg[HEADER..];
            r[0] = family as u8;
            r[1] = libc::IPPROTO_TCP as u8;
            r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
            r[8..10].copy_from_slice(&src.port().to_be_bytes());
            r[10..12].copy_from_slice(&dst.port().to_be_bytes());
            r[12..28].copy_from_slice(&addr(src));
            r[28..44].copy_from_slice(&addr(dst));
            r[48..56].copy_from_slice(&[0xff; 8]); // no cookie
                                                   // SAFETY: plain syscalls on a socket this function owns and closes; the buffers
                                                   // outlive the calls and their lengths are theirs.
            unsafe {
                let fd = libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    libc::NETLINK_SOCK_DIAG,
                );
                if fd < 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
                let mut to: libc::sockaddr_nl = std::mem::zeroed();
                to.nl_family = libc::AF_NETLINK as u16;
                let sent = libc::sendto(
                    fd,
                    msg.as_ptr().cast(),
                    msg.len(),
                    0,
                    (&to as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                );
                let mut buf = [0u8; 512];
                let got = if sent < 0 {
                    -1
                } else {
                    libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0)
                };
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if got < (HEADER as isize) {
                    return Err(error.to_string());
                }
                let kind = u16::from_ne_bytes([buf[4], buf[5]]);
                if kind == NLMSG_ERROR
                    || kind != SOCK_DIAG_BY_FAMILY
                    || (got as usize) < HEADER + 72
                {
                    return Err("sock_diag found no such socket".into());
                }
                let m = &buf[HEADER..];
                let uid = u32::from_ne_bytes([m[64], m[65], m[66], m[67]]);
                let inode = u32::from_ne_bytes([m[68], m[69], m[70], m[71]]);
                Ok((uid, inode as u64))
            }
        }
    }

    /// `root` and every process below it, nearest first, from each task's `children` file;
    /// where the kernel has none, from every process's parent.
    fn descendants(root: u32) -> Vec<u32> {
        if !std::path::Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
            return by_parent(root);
        }
        let mut out = Vec::new();
        let mut queue = VecDeque::from([root]);
        while let Some(pid) = queue.pop_front() {
            out.push(pid);
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.filter_map(Result::ok) {
                let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                    continue;
                };
                queue.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        // Test processes are the leaves: look there first.
        out.reverse();
        out
    }

    fn by_parent(root: u32) -> Vec<u32> {
        let parents: Vec<(u32, u32)> = every_process()
            .into_iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // The field after the command's closing parenthesis, then the state.
                let after = &stat[stat.rfind(')')? + 2..];
                let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
                Some((pid, ppid))
            })
            .collect();
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() {
            let p = out[i];
            out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
            i += 1;
        }
        out.reverse();
        out
    }

    fn every_process() -> Vec<u32> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The kernel's answer by address and /proc/net/tcp agree.
        #[test]
        fn sock_diag_and_the_table_agree() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (accepted, peer) = listener.accept().unwrap();
            let local = accepted.local_addr().unwrap();
            let uid = std::fs::metadata("/proc/self").unwrap().uid();
            let (owner, inode) = diag::inode(peer, local).unwrap();
            assert_eq!(owner, uid);
            assert_eq!(inode, table_inode(peer, local, uid).unwrap());
            drop(client);
        }

        #[test]
        fn addresses_in_procs_form() {
            assert_eq!(v4("127.0.0.1".parse().unwrap(), 8080), "0100007F:1F90");
            assert_eq!(
                v6("::1".parse().unwrap(), 80),
                "00000000000000000000000001000000:0050"
            );
        }

        /// A child that holds a connection to us is found among our descendants, and its
        /// environment names its test.
        #[test]
        fn finds_the_child_at_the_other_end() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let mut child = std::process::Command::new("bash")
                .args([
                    "-c",
                    &format!("exec 3<>/dev/tcp/127.0.0.1/{port}; read -t 30 <&3"),
                ])
                .env("LLMREPLAY_PEER_TEST", "pkg::bin$case (call)")
                .spawn()
                .unwrap();
            let (accepted, peer) = listener.accept().unwrap();
            let vars = super::super::IdVars::Named("LLMREPLAY_PEER_TEST".into());
            let peers = Peers::new(Some(std::process::id()), vars.clone());
            let found = peers.identify(peer, accepted.local_addr().unwrap());
            let again = peers.identify(peer, accepted.local_addr().unwrap());
            let everyone = Peers::new(None, vars).identify(peer, accepted.local_addr().unwrap());
            assert_eq!(again, found, "found again among the recent");
            drop(accepted);
            let _ = child.kill();
            let _ = child.wait();
            assert_eq!(found.unwrap().test, "pkg::bin$case");
            assert_eq!(everyone.unwrap().test, "pkg::bin$case");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_variables_and_a_named_one() {
        let env =
            b"A=1\0NEXTEST_BINARY_ID=crate::chat\0NEXTEST_TEST_NAME=mod::t\0NEXTEST_ATTEMPT=2\0";
        assert_eq!(
            from_environ(env, &IdVars::Nextest),
            Some(PeerTest {
                test: "crate::chat$mod::t".into(),
                attempt: 2
            })
        );
        let py = b"PYTEST_CURRENT_TEST=tests/test_a.py::test_b (setup)\0";
        assert_eq!(
            from_environ(py, &IdVars::Named("PYTEST_CURRENT_TEST".into()))
                .unwrap()
                .test,
            "tests/test_a.py::test_b"
        );
        assert_eq!(from_environ(b"B=2\0", &IdVars::Nextest), None);
    }
}
