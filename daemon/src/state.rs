//! What the daemon shares across its connections: the settings, the store and journal, the
//! upstream client, the run's CA, and what it learns as it serves (captured hosts, each
//! connection's test, the sessions and connections in flight).

use crate::config::Settings;
use crate::journal::Journal;
use crate::{ca, faults, peer, provider, upstream};
use cassettes::Store;
use std::net::SocketAddr;
use std::sync::Arc;

pub(crate) struct State {
    pub settings: Settings,
    pub faults: faults::Faults,
    /// The port a `Host` header must name, when the daemon listens on loopback only: a page
    /// that reaches it through DNS rebinding names its own host instead.
    pub loopback_port: Option<u16>,
    pub store: Arc<Store>,
    pub journal: Arc<Journal>,
    /// Set once the run is interrupted: no test's end removes a recording after that.
    pub interrupted: Arc<std::sync::atomic::AtomicBool>,
    /// Made on first use when the mode never goes upstream: loading the system's roots is
    /// most of a replay run's start.
    pub client: std::sync::OnceLock<Result<upstream::Client, String>>,
    /// WebSocket sessions still open: shutdown waits for them, so that a session that just
    /// closed is saved.
    pub sessions: InFlight,
    /// Connections being served, on the listener or inside a proxy's tunnel: shutdown asks
    /// each to finish (`stop`) and waits for them.
    pub connections: InFlight,
    /// Set once at shutdown; every connection watches it.
    pub stop: tokio::sync::watch::Sender<bool>,
    /// The run's CA, when capture is on: the daemon is then each test's HTTPS proxy.
    pub ca: Option<Arc<ca::RunCa>>,
    /// The providers of the hosts captured so far, by scheme, host and port.
    pub captured: std::sync::Mutex<std::collections::HashMap<String, Arc<provider::Provider>>>,
    /// How to tell a connection's test from its process, once set (README, "Identifying a
    /// connection's test").
    pub peers: Arc<std::sync::OnceLock<peer::Peers>>,
    /// The newest attempt seen of each test a peer named: a higher one starts its sequence
    /// afresh, as a retry does.
    pub attempts: std::sync::Mutex<std::collections::HashMap<cassettes::TestId, u32>>,
    /// This process's uid, when the daemon listens on loopback and the system tells whose a
    /// connection is: another user's connections are refused.
    pub own_uid: Option<u32>,
    /// The test each process said it runs now (`begin?pid=`), until it says it ended.
    pub announced: Announced,
    /// What each transport keeps across its exchanges (the MCP shim's tickets, MCP listening
    /// streams), by its type: a transport owns its state, and nothing here names one.
    pub transports: Transports,
    /// The root process of a command whose process trees name their calls when nothing else
    /// does (`cargo llmreplay run`).
    pub trees: Arc<std::sync::OnceLock<u32>>,
}

/// A transport's state by its type, made on first use.
#[derive(Default)]
pub(crate) struct Transports(
    std::sync::RwLock<
        std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    >,
);

impl Transports {
    /// The transport state of type `T`, made with its default the first time it is asked for.
    pub fn get<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let id = std::any::TypeId::of::<T>();
        let found = self.0.read().expect("transports lock").get(&id).cloned();
        let any = match found {
            Some(any) => any,
            None => self
                .0
                .write()
                .expect("transports lock")
                .entry(id)
                .or_insert_with(|| Arc::new(T::default()))
                .clone(),
        };
        any.downcast().expect("kept under its own type")
    }
}

/// The tests processes announced, by pid: a runner's worker runs one test after another on
/// connections it keeps, so each request is filed under the test its process runs then. A
/// process may run several at once (vitest's threads share one process, `describe.concurrent`
/// and concurrent async tests one thread): each is followed until its own `end`, and a request
/// that names none of them is refused rather than filed under a guess.
#[derive(Default)]
pub(crate) struct Announced {
    /// Set once any process announced: until then a request costs no lookup.
    any: std::sync::atomic::AtomicBool,
    /// Each process's running tests, oldest first.
    by_pid: std::sync::Mutex<std::collections::HashMap<u32, Vec<cassettes::TestId>>>,
}

/// What a process announced it runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Running {
    One(cassettes::TestId),
    /// Several tests at once, oldest first.
    Several(u32, Vec<cassettes::TestId>),
}

impl Announced {
    /// Most processes announcing at once: a runner's workers, one entry each.
    pub const MAX: usize = 4096;
    /// Most tests one process runs at once.
    pub const MAX_AT_ONCE: usize = 1024;

    /// `pid` runs `test` from now on. When [`Self::MAX`] processes are followed, those that
    /// are gone (a killed worker never says it ended) make room; when all are still running,
    /// the announcement is refused, never kept silently unheard.
    pub fn begin(&self, pid: u32, test: &cassettes::TestId) -> Result<(), String> {
        self.begin_with(pid, test, crate::peer::alive)
    }

    fn begin_with(
        &self,
        pid: u32,
        test: &cassettes::TestId,
        alive: impl Fn(u32) -> Option<bool>,
    ) -> Result<(), String> {
        let mut by_pid = self.by_pid.lock().expect("announced lock");
        if by_pid.len() >= Self::MAX && !by_pid.contains_key(&pid) {
            by_pid.retain(|p, _| alive(*p) != Some(false));
            if by_pid.len() >= Self::MAX {
                return Err(format!("the daemon follows at most {} processes' tests at once, and the {} it follows are all still running without having said `end`", Self::MAX, by_pid.len()));
            }
        }
        let running = by_pid.entry(pid).or_default();
        if !running.contains(test) {
            if running.len() >= Self::MAX_AT_ONCE {
                return Err(format!("process {pid} already runs {} tests that have not said `end`; each test's end says `end` with its own test id", running.len()));
            }
            running.push(test.clone());
        }
        self.any.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// `pid` no longer runs `test`; with no test named, it runs none.
    pub fn end(&self, pid: u32, test: Option<&cassettes::TestId>) {
        let mut by_pid = self.by_pid.lock().expect("announced lock");
        if let (Some(test), Some(running)) = (test, by_pid.get_mut(&pid)) {
            running.retain(|t| t != test);
            if !running.is_empty() {
                return;
            }
        }
        by_pid.remove(&pid);
    }

    /// Whether any process ever announced.
    pub fn any(&self) -> bool {
        self.any.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the nearest of `lineage` (a process and its ancestors) that announced runs now.
    pub fn of(&self, lineage: &[u32]) -> Option<Running> {
        let by_pid = self.by_pid.lock().expect("announced lock");
        lineage
            .iter()
            .find_map(|pid| match by_pid.get(pid)?.as_slice() {
                [] => None,
                [one] => Some(Running::One(one.clone())),
                several => Some(Running::Several(*pid, several.to_vec())),
            })
    }
}

/// What the daemon knows of one connection.
pub(crate) struct Conn {
    /// Whether a proxy request on it was already challenged for credentials.
    pub challenged: std::sync::atomic::AtomicBool,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Its process, and the test its environment names, once asked.
    pub identified: tokio::sync::OnceCell<Option<peer::Holder>>,
    /// Its process and that process's ancestors, once a process announced a test.
    pub lineage: std::sync::OnceLock<Vec<u32>>,
    /// Whether it is this user's (or cannot be told), once asked.
    pub admitted: std::sync::OnceLock<bool>,
}

impl Conn {
    /// A connection from `peer`, arrived at `local`.
    pub fn new(peer: SocketAddr, local: SocketAddr) -> Conn {
        Conn {
            challenged: std::sync::atomic::AtomicBool::new(false),
            peer,
            local,
            identified: tokio::sync::OnceCell::new(),
            lineage: std::sync::OnceLock::new(),
            admitted: std::sync::OnceLock::new(),
        }
    }

    /// Whether the connection may be served: on loopback, only this user's processes may
    /// use the daemon (its recordings, its keys for re-signing, its proxy). Another user's
    /// connection is refused and logged; one whose owner cannot be told is served.
    pub(crate) fn admitted(&self, state: &State) -> bool {
        let Some(uid) = state.own_uid else {
            return true;
        };
        *self.admitted.get_or_init(|| {
            match peer::Peers::socket_owner(self.peer, self.local) {
                Ok(owner) if owner != uid => {
                    tracing::warn!(target: "cargo_llmreplay::daemon", peer = %self.peer, owner, "refused a connection of another user (uid {owner}); the daemon serves only its own user's processes");
                    false
                }
                _ => true,
            }
        })
    }

    /// The test of the process at the other end, when peers are identified: the one it (or an
    /// ancestor) announced for now, else the one its environment names (cached: a process's
    /// environment does not change).
    pub async fn peer_test(&self, state: &Arc<State>) -> Option<Running> {
        let holder = self.holder(state).await?;
        if state.announced.any() {
            let lineage = self.lineage.get_or_init(|| peer::lineage(holder.pid));
            if let Some(running) = state.announced.of(lineage) {
                return Some(running);
            }
        }
        self.named_test(state, holder).map(Running::One)
    }

    /// The test the process's environment names, else its tree's program under the command.
    fn named_test(&self, state: &Arc<State>, holder: &peer::Holder) -> Option<cassettes::TestId> {
        if let Some(p) = &holder.test {
            return Some(p.test.clone());
        }
        // A command's process tree with nothing that names its test: the tree's own name.
        let root = *state.trees.get()?;
        let lineage = self.lineage.get_or_init(|| peer::lineage(holder.pid));
        let top = match lineage.iter().position(|p| *p == root) {
            Some(0) => root,
            // This program under the root is an MCP server's shim the command started: its
            // messages are the command's own.
            Some(i)
                if peer::program_name(lineage[i - 1]) == peer::program_name(std::process::id()) =>
            {
                root
            }
            Some(i) => lineage[i - 1],
            None => return None,
        };
        peer::program_name(top).map(cassettes::TestId::new)
    }

    /// The connection's process and its ancestors, when its process can be found: what a
    /// captured tunnel, kept open across tests, files each request by.
    pub async fn lineage_now(&self, state: &Arc<State>) -> Option<Vec<u32>> {
        let holder = self.holder(state).await?;
        Some(
            self.lineage
                .get_or_init(|| peer::lineage(holder.pid))
                .clone(),
        )
    }

    /// The process at the other end, found once.
    async fn holder(&self, state: &Arc<State>) -> Option<&peer::Holder> {
        let peers = state.peers.get()?;
        self.identified
            .get_or_init(|| async {
                let (peer, local) = (self.peer, self.local);
                let started = std::time::Instant::now();
                // Tens of microseconds for a process seen before or a new test: on this
                // worker. The walk of the whole tree, rarer and slower, blocks a thread.
                let found = match peers.quick(peer, local) {
                    Ok(peer::Quick::Found(test)) => Ok(test),
                    Ok(peer::Quick::Walk(pending)) => {
                        match tokio::runtime::Handle::current().runtime_flavor() {
                            tokio::runtime::RuntimeFlavor::MultiThread => {
                                tokio::task::block_in_place(|| peers.walk(pending))
                            }
                            _ => peers.walk(pending),
                        }
                    }
                    Err(e) => Err(e),
                };
                tracing::trace!(target: "cargo_llmreplay::daemon", us = started.elapsed().as_micros() as u64, "identified a connection's process");
                match found {
                    Ok(holder) => {
                        if let Some(p) = &holder.test {
                            state.note_attempt(&p.test, p.attempt);
                        }
                        Some(holder)
                    }
                    Err(why) => {
                        tracing::warn!(target: "cargo_llmreplay::daemon", "cannot tell this connection's test from its process ({why}); its requests are filed under `default` unless they name their test");
                        None
                    }
                }
            })
            .await
            .as_ref()
    }
}

impl State {
    /// `path` as the daemon's log, the run log and the report show it: a key's value or a
    /// secret's shape in it becomes the placeholder, as in the cassette (README, "Secrets in
    /// what the daemon says").
    pub(crate) fn shown_path(&self, path: &str) -> String {
        crate::route::shown_path(self.settings.normalizer.guard().scrubber(), path)
    }

    /// The client that reaches providers, made now if it was not at start.
    pub fn client(&self) -> Result<&upstream::Client, &str> {
        self.client
            .get_or_init(|| {
                upstream::client(self.settings.limits.connect_timeout, &self.settings.network)
                    .map_err(|e| format!("could not set up the upstream client: {e}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Notes that a peer's process runs `attempt` of `test`: the first attempt begins it, a
    /// later one starts its sequence afresh.
    pub(crate) fn note_attempt(&self, test: &cassettes::TestId, attempt: u32) {
        let mut attempts = self.attempts.lock().expect("attempts lock");
        let last = attempts.entry(test.clone()).or_insert(0);
        if attempt > *last {
            if *last > 0 {
                self.store.reset_test(test);
            }
            *last = attempt;
            self.journal.attempt_began(test);
        }
    }
}

/// Counts what is in flight (connections, WebSocket sessions); each holds an
/// [`InFlightGuard`], and shutdown waits until none is left.
#[derive(Default)]
pub(crate) struct InFlight {
    open: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

pub(crate) struct InFlightGuard<'a>(&'a InFlight);

impl InFlight {
    pub fn enter(&self) -> InFlightGuard<'_> {
        self.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlightGuard(self)
    }

    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.open.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if self
            .0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Announced, Running};
    use cassettes::TestId;

    #[test]
    fn gone_processes_make_room_and_running_ones_refuse() {
        let announced = Announced::default();
        let t = TestId::new("h$t".to_string());
        for pid in 0..Announced::MAX as u32 {
            announced.begin_with(pid, &t, |_| Some(true)).unwrap();
        }
        let refused = announced.begin_with(99_999, &t, |_| Some(true));
        assert!(
            refused.unwrap_err().contains("all still running"),
            "all running: refused"
        );
        assert!(
            announced.begin_with(99_999, &t, |_| None).is_err(),
            "cannot tell: kept"
        );
        announced.begin_with(7, &t, |_| Some(true)).unwrap();
        announced
            .begin_with(99_999, &t, |p| Some(p % 2 == 0))
            .unwrap();
        assert_eq!(announced.of(&[99_999]), Some(Running::One(t.clone())));
        assert_eq!(announced.of(&[1]), None, "a gone process was forgotten");
        assert_eq!(announced.of(&[2]), Some(Running::One(t)));
    }

    #[test]
    fn tests_at_once_in_one_process_end_one_by_one_and_are_never_guessed() {
        let announced = Announced::default();
        let (a, b) = (TestId::new("a.test.js > a"), TestId::new("b.test.js > b"));
        announced.begin(10, &a).unwrap();
        announced.begin(10, &b).unwrap();
        announced.begin(10, &b).unwrap();
        let both = announced.of(&[10, 1]).unwrap();
        assert_eq!(both, Running::Several(10, vec![a.clone(), b.clone()]));
        announced.end(10, Some(&a));
        assert_eq!(
            announced.of(&[10]),
            Some(Running::One(b.clone())),
            "b goes on"
        );
        announced.end(10, Some(&a));
        assert_eq!(
            announced.of(&[10]),
            Some(Running::One(b.clone())),
            "a second end of a changes nothing"
        );
        announced.begin(10, &a).unwrap();
        announced.end(10, None);
        assert_eq!(
            announced.of(&[10]),
            None,
            "an end naming no test ends them all"
        );
    }
}
