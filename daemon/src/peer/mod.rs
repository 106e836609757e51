//! Which test a connection belongs to, from the process at its other end (Linux): the
//! socket's inode from `/proc/net/tcp{,6}`, the process holding it among the descendants of
//! the test run (or, for `serve --test-id-env`, among this user's processes), and the test id
//! in that process's environment, which children a test spawns inherit. No exec per test and
//! no variable to set per test: nextest sets `NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME` and
//! `NEXTEST_ATTEMPT` in every test process. Any failure says why, and the caller falls back.

use std::net::SocketAddr;

/// Why a connection's test could not be told from its process; the caller falls back.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// This system does not say (not Linux).
    #[error("{0} needs Linux")]
    Unsupported(&'static str),
    /// A file of `/proc` could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The connection is another user's.
    #[error("the connection from {0} is another user's")]
    OtherUser(SocketAddr),
    /// `/proc/net/tcp` has a field that is not a number.
    #[error("{table}: {what} that is no number")]
    Table {
        /// The table.
        table: &'static str,
        /// The field.
        what: &'static str,
    },
    /// `/proc/net/tcp` has no such socket.
    #[error("{table} has no socket from {peer} to {local}")]
    NoSocket {
        /// The table.
        table: &'static str,
        /// The connection's far end.
        peer: SocketAddr,
        /// Its near end.
        local: SocketAddr,
    },
    /// No process of the tree holds the socket.
    #[error("no process of the run holds the connection from {peer} (socket {inode})")]
    NoProcess {
        /// The connection's far end.
        peer: SocketAddr,
        /// The socket's inode.
        inode: u64,
    },
    /// The process holding the socket names no test in its environment.
    #[error("process {0} holds the connection but its environment names no test")]
    NoTest(u32),
}

/// Where a connection's test id is read from.
#[derive(Clone, Debug)]
pub enum IdVars {
    /// nextest's: `NEXTEST_BINARY_ID$NEXTEST_TEST_NAME`, and `NEXTEST_ATTEMPT`.
    Nextest,
    /// One variable of the user's (`serve --test-id-env PYTEST_CURRENT_TEST`), whose value is
    /// the test id (pytest's phase suffix, ` (call)`, left out).
    Named(String),
    /// None: the processes announce the test they run (`begin?pid=`), as the pytest plugin and
    /// the vitest and jest setup files do.
    Announced,
}

/// A connection's test, as its process's environment names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTest {
    /// The test id.
    pub test: cassettes::TestId,
    /// Its attempt, from 1 (always 1 for a named variable).
    pub attempt: u32,
}

/// The process at the other end of a connection, and the test its environment names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its pid: a process may announce the test it runs now (`begin?pid=`).
    pub pid: u32,
    /// What its environment names; none for a process that announces its tests instead.
    pub test: Option<PeerTest>,
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
    Found(Holder),
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
    pub fn socket_owner(peer: SocketAddr, local: SocketAddr) -> Result<u32, PeerError> {
        #[cfg(target_os = "linux")]
        {
            linux::owner(peer, local)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (peer, local);
            Err(PeerError::Unsupported("telling a connection's owner"))
        }
    }

    /// This process's uid, where connections' owners can be told apart (Linux).
    pub fn own_uid() -> Option<u32> {
        #[cfg(target_os = "linux")]
        {
            proc_dir::own_uid().ok()
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
    pub fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Result<Holder, PeerError> {
        match self.quick(peer, local)? {
            Quick::Found(test) => Ok(test),
            Quick::Walk(pending) => self.walk(pending),
        }
    }

    /// The cheap part of [`Peers::identify`], a few tens of microseconds: the processes that
    /// held a connection before (each at the descriptor its last one had), then the new
    /// children of their parents.
    pub fn quick(&self, peer: SocketAddr, local: SocketAddr) -> Result<Quick, PeerError> {
        #[cfg(target_os = "linux")]
        {
            linux::quick(self, peer, local)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (peer, local);
            Err(PeerError::Unsupported("finding a connection's process"))
        }
    }

    /// The rest of [`Peers::identify`]: every process of the tree, which takes a few hundred
    /// microseconds and more on a busy machine.
    pub fn walk(&self, pending: Pending) -> Result<Holder, PeerError> {
        #[cfg(target_os = "linux")]
        {
            linux::walk(self, pending.socket)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = pending;
            Err(PeerError::Unsupported("finding a connection's process"))
        }
    }
}

/// `pid` and its ancestors, nearest first (Linux); `pid` alone elsewhere.
pub fn lineage(pid: u32) -> Vec<u32> {
    #[cfg(target_os = "linux")]
    {
        linux::lineage(pid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        vec![pid]
    }
}

/// This user's processes, other than this one, whose environment holds `name=value` (Linux):
/// what a command started and left running when it exited. None where it cannot be told.
pub fn holding_env(name: &str, value: &str) -> Option<Vec<u32>> {
    #[cfg(target_os = "linux")]
    {
        Some(linux::holding(format!("{name}={value}").as_bytes()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (name, value);
        None
    }
}

/// Whether process `pid` still exists: Linux's `/proc`; elsewhere none (it cannot be told).
pub fn alive(pid: u32) -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        Some(std::path::Path::new(&format!("/proc/{pid}")).exists())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// The file name of the program `pid` runs (Linux), e.g. `mypkg.test` for a `go test` binary,
/// without an interpreter's minor version (`python3.11` is `python3`): a test named for its
/// program keeps its recordings when the interpreter is upgraded.
pub fn program_name(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy();
    let name = without_minor_version(&name);
    (!name.is_empty()).then(|| name.to_string())
}

/// `python3.11` → `python3`, `pypy3.10` → `pypy3`, `ruby3.2.1` → `ruby3`; `mypkg.test` and
/// `node` as they are.
fn without_minor_version(name: &str) -> &str {
    let Some((head, tail)) = name.split_once('.') else {
        return name;
    };
    let versioned = head.starts_with(|c: char| c.is_ascii_alphabetic())
        && head.chars().all(|c| c.is_ascii_alphanumeric())
        && tail
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if versioned {
        head
    } else {
        name
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
        IdVars::Announced => None,
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
mod linux;
#[cfg(target_os = "linux")]
mod proc_dir;
#[cfg(target_os = "linux")]
mod sock_diag;

#[cfg(test)]
mod tests {
    use super::without_minor_version;

    #[test]
    fn an_interpreter_is_named_without_its_minor_version() {
        assert_eq!(without_minor_version("python3.11"), "python3");
        assert_eq!(without_minor_version("python3.12"), "python3");
        assert_eq!(without_minor_version("pypy3.10"), "pypy3");
        assert_eq!(without_minor_version("ruby3.2.1"), "ruby3");
        assert_eq!(without_minor_version("mypkg.test"), "mypkg.test");
        assert_eq!(without_minor_version("node"), "node");
        assert_eq!(without_minor_version("a.b.3"), "a.b.3");
    }

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
