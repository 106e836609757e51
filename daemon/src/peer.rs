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
    pub test: cassettes::TestId,
    /// Its attempt, from 1 (always 1 for a named variable).
    pub attempt: u32,
}

/// Processes remembered after holding a connection: a test opens most of its connections from
/// one process, so they are looked at first.
const KNOWN: usize = 64;

/// Processes whose children are looked at before the whole tree: a test's spawner (nextest)
/// starts the next test there.
const SPAWNERS: usize = 16;

/// Finds the test of a connection's peer process.
#[derive(Clone, Debug)]
pub struct Peers {
    /// Only the descendants of this process are searched; `None`: every process of this user.
    pub within: Option<u32>,
    /// What names the test.
    pub vars: IdVars,
    #[cfg(target_os = "linux")]
    memory: std::sync::Arc<linux::Memory>,
}

/// What [`Peers::quick`] found: the test, or the socket still to look for in the whole tree.
#[derive(Debug)]
pub enum Quick {
    /// The connection's test.
    Found(PeerTest),
    /// Not held by a process seen before nor by a new child of one of their parents:
    /// [`Peers::walk`] searches the whole tree.
    Walk(Pending),
}

/// A socket not found by [`Peers::quick`], with the processes already looked at.
#[derive(Debug)]
pub struct Pending {
    #[cfg(target_os = "linux")]
    socket: linux::Socket,
}

impl Peers {
    /// Searches the descendants of `within` (every process of this user when `None`) for the
    /// test that `vars` names.
    pub fn new(within: Option<u32>, vars: IdVars) -> Peers {
        Peers {
            within,
            vars,
            #[cfg(target_os = "linux")]
            memory: Default::default(),
        }
    }

    /// The uid that owns the other end of the connection from `peer` to `local` on this
    /// machine, where the system says (Linux: sock_diag, else `/proc/net/tcp`).
    pub fn socket_owner(peer: SocketAddr, local: SocketAddr) -> Result<u32, String> {
        #[cfg(target_os = "linux")]
        {
            linux::owner(peer, local)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (peer, local);
            Err("telling a connection's owner needs Linux".into())
        }
    }

    /// This process's uid, where connections' owners can be told apart (Linux).
    pub fn own_uid() -> Option<u32> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self").ok().map(|m| m.uid())
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
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
        match self.quick(peer, local)? {
            Quick::Found(test) => Ok(test),
            Quick::Walk(pending) => self.walk(pending),
        }
    }

    /// The cheap part of [`Peers::identify`], a few tens of microseconds: the processes that
    /// held a connection before (each at the descriptor its last one had), then the new
    /// children of their parents.
    pub fn quick(&self, peer: SocketAddr, local: SocketAddr) -> Result<Quick, String> {
        #[cfg(target_os = "linux")]
        {
            linux::quick(self, peer, local)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (peer, local);
            Err("finding a connection's process needs Linux".into())
        }
    }

    /// The rest of [`Peers::identify`]: every process of the tree, which takes a few hundred
    /// microseconds and more on a busy machine.
    pub fn walk(&self, pending: Pending) -> Result<PeerTest, String> {
        #[cfg(target_os = "linux")]
        {
            linux::walk(self, pending.socket)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = pending;
            Err("finding a connection's process needs Linux".into())
        }
    }
}

/// Reads a test id and attempt from a process's environment block (NUL-separated `K=V`).
fn from_environ(environ: &[u8], vars: &IdVars) -> Option<PeerTest> {
    let get = |name: &str| -> Option<String> {
        String::from_utf8(environ_var(environ, name)?.to_vec()).ok()
    };
    match vars {
        IdVars::Nextest => {
            let binary = get("NEXTEST_BINARY_ID")?;
            let name = get("NEXTEST_TEST_NAME")?;
            let attempt = get("NEXTEST_ATTEMPT")
                .and_then(|a| a.parse().ok())
                .unwrap_or(1);
            Some(PeerTest {
                test: cassettes::TestId::nextest(&binary, &name),
                attempt,
            })
        }
        IdVars::Named(var) => {
            let value = get(var)?;
            let test = ["call", "setup", "teardown"]
                .iter()
                .find_map(|phase| value.strip_suffix(&format!(" ({phase})")))
                .unwrap_or(&value);
            (!test.is_empty()).then(|| PeerTest {
                test: cassettes::TestId::new(test),
                attempt: 1,
            })
        }
    }
}

/// The value of `name` in an environment block, the first one as `getenv` would find it.
/// Searched as bytes: a test process's environment is a hundred variables, and only the
/// value looked for need be text.
fn environ_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let entry = [b"\0", name.as_bytes(), b"="].concat();
    let start = match environ.starts_with(&entry[1..]) {
        true => entry.len() - 1,
        false => memchr::memmem::find(environ, &entry)? + entry.len(),
    };
    let len = memchr::memchr(0, &environ[start..]).unwrap_or(environ.len() - start);
    Some(&environ[start..start + len])
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{from_environ, PeerTest, Peers, Pending, Quick};
    use std::collections::VecDeque;
    use std::ffi::CString;
    use std::io::Read;
    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
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
        test: PeerTest,
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

    /// An open `/proc/<pid>` directory.
    #[derive(Debug)]
    struct ProcDir(OwnedFd);

    impl ProcDir {
        fn open(pid: u32) -> Option<ProcDir> {
            let path = CString::new(format!("/proc/{pid}")).ok()?;
            // SAFETY: a NUL-terminated path; a descriptor returned is new and owned here.
            let fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            (fd >= 0).then(|| ProcDir(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// Whether the process's descriptor `fd` is `link` (`socket:[inode]`): one readlinkat,
        /// which fails once the process is gone.
        fn holds(&self, fd: i32, link: &str) -> bool {
            let Ok(name) = CString::new(format!("fd/{fd}")) else {
                return false;
            };
            let mut buf = [0u8; 64];
            // SAFETY: the buffer outlives the call and its length is its own.
            let n = unsafe {
                libc::readlinkat(
                    self.0.as_raw_fd(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            n >= 0 && &buf[..n as usize] == link.as_bytes()
        }

        /// One of its files (`environ`, `stat`), read whole.
        fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
            let cname = CString::new(name).map_err(std::io::Error::other)?;
            // SAFETY: a NUL-terminated name relative to a directory this value owns; a
            // descriptor returned is new and owned here.
            let fd = unsafe {
                libc::openat(
                    self.0.as_raw_fd(),
                    cname.as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Room for a whole environment at once: each read of another process's memory
            // looks its pages up again. A read that leaves room over has it all (`environ`
            // is copied until the buffer or the block ends; `stat` is one short line).
            let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            const ROOM: usize = 32 * 1024;
            let mut out = Vec::<u8>::with_capacity(ROOM);
            // Read into the room as it is, not zeroed first: most of it is never written.
            // SAFETY: the kernel writes at most ROOM bytes into the capacity reserved, and
            // the length is set to what it wrote.
            let n = unsafe { libc::read(file.as_raw_fd(), out.as_mut_ptr().cast(), ROOM) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            unsafe { out.set_len(n as usize) };
            if n as usize == ROOM {
                file.read_to_end(&mut out)?;
            }
            Ok(out)
        }

        /// The user that owns the process.
        fn owner(&self) -> Option<u32> {
            std::fs::File::from(self.0.try_clone().ok()?)
                .metadata()
                .ok()
                .map(|m| m.uid())
        }

        /// Whether the process is still there (its `fd` directory goes with it).
        fn alive(&self) -> bool {
            // SAFETY: a NUL-terminated name relative to a directory this value owns.
            unsafe { libc::faccessat(self.0.as_raw_fd(), c"fd".as_ptr(), libc::F_OK, 0) == 0 }
        }
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

    pub fn quick(peers: &Peers, peer: SocketAddr, local: SocketAddr) -> Result<Quick, String> {
        let memory = &peers.memory;
        let uid = match memory.uid.get() {
            Some(uid) => *uid,
            None => {
                let uid = std::fs::metadata("/proc/self")
                    .map_err(|e| format!("/proc/self: {e}"))?
                    .uid();
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
                return Ok(Quick::Found(k.test.clone()));
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
                return Ok(Quick::Found(k.test.clone()));
            }
        }
        Ok(Quick::Walk(Pending { socket }))
    }

    pub fn walk(peers: &Peers, mut socket: Socket) -> Result<PeerTest, String> {
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
        Err(format!(
            "no process of the run holds the connection from {} (socket {})",
            socket.peer, socket.inode
        ))
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
    ) -> Result<Option<PeerTest>, String> {
        children.retain(|(_, pid)| {
            known.iter().all(|k| k.pid != *pid) && !socket.searched.contains(pid)
        });
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
    ) -> Result<Option<PeerTest>, String> {
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
    ) -> Result<PeerTest, String> {
        let environ = dir
            .read("environ")
            .map_err(|e| format!("/proc/{pid}/environ: {e}"))?;
        let test = from_environ(&environ, &peers.vars).ok_or_else(|| {
            format!("process {pid} holds the connection but its environment names no test")
        })?;
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
        Ok(test)
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
    fn socket_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, String> {
        match diag::inode(peer, local) {
            Ok((owner, inode)) if owner == uid => Ok(inode),
            Ok(_) => Err(format!("the connection from {peer} is another user's")),
            Err(_) => table_inode(peer, local, uid),
        }
    }

    /// The uid that owns the socket whose local end is `peer` and remote end `local`.
    pub fn owner(peer: SocketAddr, local: SocketAddr) -> Result<u32, String> {
        match diag::inode(peer, local) {
            Ok((owner, _)) => Ok(owner),
            Err(_) => table_entry(peer, local).map(|(owner, _)| owner),
        }
    }

    /// The same from `/proc/net/tcp{,6}`, which the kernel makes by walking every TCP socket.
    fn table_inode(peer: SocketAddr, local: SocketAddr, uid: u32) -> Result<u64, String> {
        match table_entry(peer, local)? {
            (owner, inode) if owner == uid => Ok(inode),
            _ => Err(format!("the connection from {peer} is another user's")),
        }
    }

    /// The owner and inode of the socket from `peer` to `local` in `/proc/net/tcp{,6}`.
    fn table_entry(peer: SocketAddr, local: SocketAddr) -> Result<(u32, u64), String> {
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
            let owner = f[7]
                .parse()
                .map_err(|_| format!("{table}: an owner that is no number"))?;
            let inode = f[9]
                .parse()
                .map_err(|_| format!("{table}: an inode that is no number"))?;
            return Ok((owner, inode));
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
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

            // One socket per thread, kept: opening one per connection costs as much as the
            // question. Each question is answered before the next is asked, and a socket that
            // failed midway is closed, so no answer is ever read for another question.
            thread_local! {
                static SOCKET: std::cell::RefCell<Option<std::os::fd::OwnedFd>> =
                    const { std::cell::RefCell::new(None) };
            }
            let mut buf = [0u8; 512];
            let got = SOCKET.with(|cell| {
                let mut cell = cell.borrow_mut();
                let socket = match cell.take() {
                    Some(socket) => socket,
                    None => open()?,
                };
                let got = ask(&socket, &msg, &mut buf)?;
                *cell = Some(socket);
                Ok::<usize, String>(got)
            })?;
            if got < HEADER {
                return Err("sock_diag answered nothing".into());
            }
            let kind = u16::from_ne_bytes([buf[4], buf[5]]);
            if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY || got < HEADER + 72 {
                return Err("sock_diag found no such socket".into());
            }
            let m = &buf[HEADER..];
            let uid = u32::from_ne_bytes([m[64], m[65], m[66], m[67]]);
            let inode = u32::from_ne_bytes([m[68], m[69], m[70], m[71]]);
            Ok((uid, inode as u64))
        }

        fn open() -> Result<OwnedFd, String> {
            // SAFETY: a plain system call; a descriptor it returns is new and owned here.
            let fd = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    libc::NETLINK_SOCK_DIAG,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }

        /// Sends `msg` to the kernel and reads its answer into `buf`.
        fn ask(socket: &OwnedFd, msg: &[u8], buf: &mut [u8]) -> Result<usize, String> {
            // SAFETY: plain system calls on a socket the caller owns; the buffers outlive the
            // calls and their lengths are theirs.
            unsafe {
                let mut to: libc::sockaddr_nl = std::mem::zeroed();
                to.nl_family = libc::AF_NETLINK as u16;
                let sent = libc::sendto(
                    socket.as_raw_fd(),
                    msg.as_ptr().cast(),
                    msg.len(),
                    0,
                    (&to as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                );
                if sent < 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
                let got = libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0);
                if got < 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
                Ok(got as usize)
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
                        Ok(Quick::Found(t)) => Ok(("quick", t.test)),
                        Ok(Quick::Walk(pending)) => peers.walk(pending).map(|t| ("walk", t.test)),
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
            let found: Vec<(&str, cassettes::TestId)> =
                found.into_iter().map(Result::unwrap).collect();
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

    /// The whole name, at the block's start or after a NUL, the first of two, to the next
    /// NUL or the end.
    #[test]
    fn a_variable_is_found_as_getenv_finds_it() {
        let env = b"X_ID=no\0ID=first\0ID_2=no\0ID=second\0LAST=end";
        assert_eq!(environ_var(env, "ID"), Some(&b"first"[..]));
        assert_eq!(environ_var(env, "X_ID"), Some(&b"no"[..]));
        assert_eq!(environ_var(env, "LAST"), Some(&b"end"[..]));
        assert_eq!(environ_var(b"ID=\0", "ID"), Some(&b""[..]));
        assert_eq!(environ_var(env, "D"), None);
        assert_eq!(environ_var(b"", "ID"), None);
    }
}
