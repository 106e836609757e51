//! Linux: the socket's owner and inode from the kernel (`sock_diag`, else `/proc/net/tcp`),
//! the process holding it found under `/proc`, and its test read from its environment.

use super::proc_dir::{own_uid, ProcDir};
use super::sock_diag;
use super::{from_environ, Holder, PeerError, PeerTest, Peers, Pending, Quick};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

/// What the daemon learnt from the connections it identified.
#[derive(Debug, Default)]
pub struct Memory {
    uid: std::sync::OnceLock<u32>,
    /// Newest first.
    known: Mutex<VecDeque<Arc<Known>>>,
    /// Parents of known processes, inside the tree searched.
    spawners: Mutex<Vec<Spawner>>,
}

/// A process that held a connection, with its test.
#[derive(Debug)]
struct Known {
    pid: u32,
    /// Its `/proc/<pid>`, opened: what is read through it is this process's even once its
    /// pid is another's (a pid is reused once its process is gone).
    dir: ProcDir,
    /// The descriptor its last connection had: a client that closes a connection and
    /// opens the next gets the same number back.
    fd: AtomicI32,
    test: Option<PeerTest>,
}

/// A process that starts the processes that connect (nextest), and its thread that
/// started the last of them: the next is most likely among that thread's children.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Spawner {
    pid: u32,
    task: Option<u32>,
    /// The descriptor at which the last child found held its connection: the children
    /// of one test binary open their first connection at the same number, so one
    /// readlinkat most often finds it before the child's descriptors are listed.
    fd: Option<i32>,
}

/// Where a process found holding a socket came from.
enum Parent<'a> {
    /// Among the children of `task` of the spawner `pid`.
    Spawner { pid: u32, task: u32 },
    /// Found in the tree (these processes), its parent yet to read.
    Tree(&'a [u32]),
}

/// The socket looked for, and the processes already searched for it.
#[derive(Debug)]
pub struct Socket {
    peer: SocketAddr,
    inode: u64,
    link: String,
    uid: u32,
    searched: Vec<u32>,
}

pub fn quick(peers: &Peers, peer: SocketAddr, local: SocketAddr) -> Result<Quick, PeerError> {
    let memory = &peers.memory;
    let uid = match memory.uid.get() {
        Some(uid) => *uid,
        None => {
            let uid = own_uid().map_err(|source| PeerError::Read {
                path: "/proc/self".into(),
                source,
            })?;
            *memory.uid.get_or_init(|| uid)
        }
    };
    let inode = socket_inode(peer, local, uid)?;
    let mut socket = Socket {
        peer,
        inode,
        link: format!("socket:[{inode}]"),
        uid,
        searched: Vec::new(),
    };
    let mut known: Vec<Arc<Known>> = memory
        .known
        .lock()
        .expect("peers lock")
        .iter()
        .cloned()
        .collect();
    // A known process at its last connection's descriptor: one readlinkat.
    for k in &known {
        if k.dir.holds(k.fd.load(Ordering::Relaxed), &socket.link) {
            memory.touch(k);
            return Ok(Quick::Found(k.holder()));
        }
    }
    // None: most often a new test, started as another ended. Those gone are forgotten
    // here, where a new process is looked for anyway, rather than asked after at every
    // connection.
    known.retain(|k| {
        let alive = k.dir.alive();
        if !alive {
            memory.forget(k);
        }
        alive
    });
    // A new process: nextest's next test, most often, a child of the parent of another,
    // started by the same thread.
    let spawners = memory.spawners.lock().expect("peers lock").clone();
    for spawner in spawners {
        // The thread that started the last one, alone: one file. Then all its threads.
        let last = spawner
            .task
            .and_then(|task| Some((task, task_children(spawner.pid, task)?)));
        if let Some((task, pids)) = last {
            let listed = pids.into_iter().map(|pid| (task, pid)).collect();
            if let Some(found) = search_new(peers, spawner, listed, &known, &mut socket)? {
                return Ok(Quick::Found(found));
            }
        }
        let Some(children) = children(spawner.pid) else {
            memory
                .spawners
                .lock()
                .expect("peers lock")
                .retain(|s| s.pid != spawner.pid);
            continue;
        };
        if let Some(found) = search_new(peers, spawner, children, &known, &mut socket)? {
            return Ok(Quick::Found(found));
        }
    }
    // A known process holding it at another descriptor (two connections at once).
    for k in &known {
        socket.searched.push(k.pid);
        if let Some(fd) = held_at(k.pid, &k.dir, &socket.link) {
            k.fd.store(fd, Ordering::Relaxed);
            memory.touch(k);
            return Ok(Quick::Found(k.holder()));
        }
    }
    Ok(Quick::Walk(Pending { socket }))
}

pub fn walk(peers: &Peers, mut socket: Socket) -> Result<Holder, PeerError> {
    let pids = match peers.within {
        Some(root) => descendants(root),
        None => every_process(),
    };
    let unsearched: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| !socket.searched.contains(p))
        .collect();
    for pid in unsearched {
        if let Some(found) = search(peers, pid, &mut socket, Parent::Tree(&pids))? {
            return Ok(found);
        }
    }
    Err(PeerError::NoProcess {
        peer: socket.peer,
        inode: socket.inode,
    })
}

/// `pid`, its parent, and theirs, up to (not including) pid 1: the processes whose announced
/// test a request from `pid` belongs to, nearest first.
pub fn lineage(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut at = pid;
    // Deep enough for a runner, its workers and what a test spawns.
    for _ in 0..32 {
        let parent = ProcDir::open(at)
            .and_then(|dir| dir.read("stat").ok())
            .and_then(|stat| parent_in(&stat));
        match parent {
            Some(p) if p > 1 && !out.contains(&p) => {
                out.push(p);
                at = p;
            }
            _ => break,
        }
    }
    out
}

impl Known {
    fn holder(&self) -> Holder {
        Holder {
            pid: self.pid,
            test: self.test.clone(),
        }
    }
}

impl Memory {
    fn touch(&self, k: &Arc<Known>) {
        let mut known = self.known.lock().expect("peers lock");
        if known.front().is_some_and(|f| Arc::ptr_eq(f, k)) {
            return;
        }
        known.retain(|o| !Arc::ptr_eq(o, k));
        known.push_front(k.clone());
    }

    fn forget(&self, k: &Arc<Known>) {
        self.known
            .lock()
            .expect("peers lock")
            .retain(|o| !Arc::ptr_eq(o, k));
    }
}

/// The test of the first of a spawner's `children` (task, pid), newest first, that is not
/// known nor searched yet and holds the socket. Each is first asked for the descriptor
/// the spawner's last child held its connection at (one readlinkat), and only then are
/// their descriptors listed.
fn search_new(
    peers: &Peers,
    spawner: Spawner,
    mut children: Vec<(u32, u32)>,
    known: &[Arc<Known>],
    socket: &mut Socket,
) -> Result<Option<Holder>, PeerError> {
    children
        .retain(|(_, pid)| known.iter().all(|k| k.pid != *pid) && !socket.searched.contains(pid));
    children.sort_unstable_by_key(|&(_, pid)| std::cmp::Reverse(pid));
    let mut opened = Vec::with_capacity(children.len());
    for (task, pid) in children {
        socket.searched.push(pid);
        let Some(dir) = open_own(pid, socket.uid) else {
            continue;
        };
        let parent = Parent::Spawner {
            pid: spawner.pid,
            task,
        };
        match spawner.fd.filter(|fd| dir.holds(*fd, &socket.link)) {
            Some(fd) => return adopt(peers, pid, dir, fd, parent).map(Some),
            None => opened.push((pid, dir, parent)),
        }
    }
    for (pid, dir, parent) in opened {
        if let Some(fd) = held_at(pid, &dir, &socket.link) {
            return adopt(peers, pid, dir, fd, parent).map(Some);
        }
    }
    Ok(None)
}

/// `/proc/<pid>`, opened, when the process is this user's: another user's process is
/// none of ours to read. What is read through it is that process's own, even once the
/// pid is another's.
fn open_own(pid: u32, uid: u32) -> Option<ProcDir> {
    ProcDir::open(pid).filter(|dir| dir.owner() == Some(uid))
}

/// The test of `pid`, when it is this user's and holds the socket; it is remembered, and
/// so is its parent as a spawner.
fn search(
    peers: &Peers,
    pid: u32,
    socket: &mut Socket,
    parent: Parent<'_>,
) -> Result<Option<Holder>, PeerError> {
    socket.searched.push(pid);
    let Some(dir) = open_own(pid, socket.uid) else {
        return Ok(None);
    };
    let Some(fd) = held_at(pid, &dir, &socket.link) else {
        return Ok(None);
    };
    adopt(peers, pid, dir, fd, parent).map(Some)
}

/// Reads the test of `pid`, found holding the socket at `fd`, and remembers it.
fn adopt(
    peers: &Peers,
    pid: u32,
    dir: ProcDir,
    fd: i32,
    parent: Parent<'_>,
) -> Result<Holder, PeerError> {
    let environ = dir.read("environ").map_err(|source| PeerError::Read {
        path: format!("/proc/{pid}/environ"),
        source,
    })?;
    // A process whose environment names no test may announce one (README, "Every runner").
    let test = from_environ(&environ, &peers.vars);
    let spawner = match parent {
        Parent::Spawner { pid, task } => Some(Spawner {
            pid,
            task: Some(task),
            fd: Some(fd),
        }),
        // Pid 1 adopts orphans and starts no test.
        Parent::Tree(tree) => dir
            .read("stat")
            .ok()
            .and_then(|stat| parent_in(&stat))
            .filter(|p| *p > 1 && tree.contains(p))
            .map(|pid| Spawner {
                pid,
                task: None,
                fd: Some(fd),
            }),
    };
    let memory = &peers.memory;
    {
        let mut list = memory.known.lock().expect("peers lock");
        list.retain(|k| k.pid != pid);
        list.push_front(Arc::new(Known {
            pid,
            dir,
            fd: fd.into(),
            test: test.clone(),
        }));
        list.truncate(super::KNOWN);
    }
    if let Some(spawner) = spawner {
        let mut spawners = memory.spawners.lock().expect("peers lock");
        match spawners.iter_mut().find(|s| s.pid == spawner.pid) {
            Some(s) => {
                s.task = spawner.task.or(s.task);
                s.fd = spawner.fd;
            }
            None => {
                spawners.insert(0, spawner);
                spawners.truncate(super::SPAWNERS);
            }
        }
    }
    Ok(Holder { pid, test })
}

/// The descriptor at which the process of `dir` holds the socket, the newest (highest)
/// first: a connection just opened is most often the process's last descriptor.
fn held_at(pid: u32, dir: &ProcDir, link: &str) -> Option<i32> {
    let mut fds: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|fd| fd.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds.into_iter().rev().find(|fd| dir.holds(*fd, link))
}

/// The parent in a `stat` file: the field after the command's closing parenthesis and
/// the state.
fn parent_in(stat: &[u8]) -> Option<u32> {
    let stat = std::str::from_utf8(&stat[stat.iter().rposition(|b| *b == b')')? + 1..]).ok()?;
    stat.split_whitespace().nth(1)?.parse().ok()
}

fn parent(pid: u32) -> Option<u32> {
    parent_in(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// The children that `pid`'s thread `task` started; `None` when it is gone.
fn task_children(pid: u32, task: u32) -> Option<Vec<u32>> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{task}/children")).ok()?;
    Some(
        list.split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect(),
    )
}

/// `pid`'s children with the task (thread) that started each, from each task's
/// `children` file; `None` when it is gone.
fn children(pid: u32) -> Option<Vec<(u32, u32)>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok())
                    .map(|c| (tid, c)),
            );
        }
    }
    Some(out)
}

/// The inode of the socket whose local end is `peer` and remote end `local`, owned by
/// `uid`: asked of the kernel by its addresses (sock_diag), else read from /proc/net/tcp.
fn socket_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, PeerError> {
    match sock_diag::inode(peer, local) {
        Ok((owner, inode)) if owner == uid => Ok(inode),
        Ok(_) => Err(PeerError::OtherUser(peer)),
        Err(_) => table_inode(peer, local, uid),
    }
}

/// The uid that owns the socket whose local end is `peer` and remote end `local`.
pub fn owner(peer: SocketAddr, local: SocketAddr) -> Result<u32, PeerError> {
    match sock_diag::inode(peer, local) {
        Ok((owner, _)) => Ok(owner),
        Err(_) => table_entry(peer, local).map(|(owner, _)| owner),
    }
}

/// The same from `/proc/net/tcp{,6}`, which the kernel makes by walking every TCP socket.
fn table_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, PeerError> {
    match table_entry(peer, local)? {
        (owner, inode) if owner == uid => Ok(inode),
        _ => Err(PeerError::OtherUser(peer)),
    }
}

/// The owner and inode of the socket from `peer` to `local` in `/proc/net/tcp{,6}`.
fn table_entry(peer: SocketAddr, local: SocketAddr) -> Result<(u32, u64), PeerError> {
    let (table, want_local, want_remote) = match (peer.ip(), local.ip()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => {
            ("/proc/net/tcp", v4(p, peer.port()), v4(l, local.port()))
        }
        (p, l) => ("/proc/net/tcp6", v6(p, peer.port()), v6(l, local.port())),
    };
    let text = std::fs::read_to_string(table).map_err(|source| PeerError::Read {
        path: table.into(),
        source,
    })?;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[1] != want_local || f[2] != want_remote {
            continue;
        }
        let owner = f[7].parse().map_err(|_| PeerError::Table {
            table,
            what: "an owner",
        })?;
        let inode = f[9].parse().map_err(|_| PeerError::Table {
            table,
            what: "an inode",
        })?;
        return Ok((owner, inode));
    }
    Err(PeerError::NoSocket { table, peer, local })
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
        queue.extend(
            children(pid)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, c)| c),
        );
    }
    // Test processes are the leaves: look there first.
    out.reverse();
    out
}

fn by_parent(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = every_process()
        .into_iter()
        .filter_map(|pid| Some((pid, parent(pid)?)))
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

/// This user's processes other than this one whose environment holds `entry`
/// (`NAME=value`), zombies left out (their environment is gone with their memory).
pub fn holding(entry: &[u8]) -> Vec<u32> {
    let (me, uid) = (std::process::id(), own_uid().ok());
    every_process()
        .into_iter()
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let Some(dir) = ProcDir::open(*pid) else {
                return false;
            };
            if dir.owner() != uid {
                return false;
            }
            dir.read("environ")
                .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry))
        })
        .collect()
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
        let uid = own_uid().unwrap();
        let (owner, inode) = sock_diag::inode(peer, local).unwrap();
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
        assert_eq!(
            again.ok(),
            found.as_ref().ok().cloned(),
            "found again among the recent"
        );
        drop(accepted);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.unwrap().test.unwrap().test, "pkg::bin$case");
        assert_eq!(everyone.unwrap().test.unwrap().test, "pkg::bin$case");
    }

    /// After the first child, the next is found among its parent's children; a process's
    /// second connection, open beside its first, is found at its own descriptor.
    #[test]
    fn the_next_child_and_a_second_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let vars = super::super::IdVars::Named("LLMREPLAY_PEER_TEST".into());
        let peers = Peers::new(Some(std::process::id()), vars);
        let mut children = Vec::new();
        let mut found = Vec::new();
        // Kept open until the children are gone: a child whose first connection closed
        // stops reading and exits, closing its second before it is looked up.
        let mut accepted_all = Vec::new();
        for (name, connections) in [("first", 1), ("second", 1), ("third", 2)] {
            let opens: String = (0..connections)
                .map(|i| format!("exec {}<>/dev/tcp/127.0.0.1/{port}; ", 3 + i))
                .collect();
            children.push(
                std::process::Command::new("bash")
                    .args(["-c", &format!("{opens}read -t 30 <&3")])
                    .env("LLMREPLAY_PEER_TEST", name)
                    .spawn()
                    .unwrap(),
            );
            for _ in 0..connections {
                let (accepted, peer) = listener.accept().unwrap();
                let quick = peers.quick(peer, accepted.local_addr().unwrap());
                let test = match quick {
                    Ok(Quick::Found(t)) => Ok(("quick", t.test.unwrap().test)),
                    Ok(Quick::Walk(pending)) => {
                        peers.walk(pending).map(|t| ("walk", t.test.unwrap().test))
                    }
                    Err(e) => Err(e),
                };
                found.push(test);
                accepted_all.push(accepted);
            }
        }
        for mut child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let found: Vec<(&str, cassettes::TestId)> = found.into_iter().map(Result::unwrap).collect();
        let at = |how: &'static str, test: &str| (how, cassettes::TestId::new(test));
        assert_eq!(
            found,
            [
                at("walk", "first"),
                at("quick", "second"),
                at("quick", "third"),
                at("quick", "third")
            ]
        );
    }
}
