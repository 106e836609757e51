//! The cost of telling a connection's test from its process (Linux): 16 test processes, each
//! holding a connection to a listener, as 16 parallel tests would. Round after round, with
//! nothing remembered, the first is found by walking the tree, the next 15 as new children of
//! the first one's parent, then each again as a known process; the median and 99th
//! percentile of each are printed.
//!
//!   cargo bench -p llmreplay-daemon --bench peer

#[cfg(target_os = "linux")]
fn main() {
    use llmreplay_daemon::peer::{IdVars, Peers};
    use std::time::Instant;

    const PROCESSES: usize = 16;
    const ROUNDS: usize = 200;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut children = Vec::new();
    let mut conns = Vec::new();
    for i in 0..PROCESSES {
        // Each child opens its connection, then waits on it; its environment names its test.
        let child = std::process::Command::new("bash")
            .args([
                "-c",
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port}; read -t 120 <&3"),
            ])
            .env("NEXTEST_BINARY_ID", "bench::many")
            .env("NEXTEST_TEST_NAME", format!("t{i}"))
            .env("NEXTEST_ATTEMPT", "1")
            .spawn()
            .unwrap();
        children.push(child);
        conns.push(listener.accept().unwrap());
    }
    let peers = Peers::new(Some(std::process::id()), IdVars::Nextest);
    let (mut walk, mut new, mut known) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let fresh = Peers::new(Some(std::process::id()), IdVars::Nextest);
        for (i, (stream, peer)) in conns.iter().enumerate() {
            let local = stream.local_addr().unwrap();
            let t = Instant::now();
            let found = fresh.identify(*peer, local).expect("identified");
            let took = t.elapsed().as_secs_f64() * 1e6;
            if i == 0 {
                walk.push(took)
            } else {
                new.push(took)
            }
            assert_eq!(found.test.unwrap().test, format!("bench::many$t{i}"));
        }
        for (i, (stream, peer)) in conns.iter().enumerate() {
            let local = stream.local_addr().unwrap();
            let t = Instant::now();
            let again = fresh.identify(*peer, local).expect("identified");
            known.push(t.elapsed().as_secs_f64() * 1e6);
            assert_eq!(again.test.unwrap().test, format!("bench::many$t{i}"));
        }
    }
    // Each connection named its own process's test.
    for (i, child) in children.iter().enumerate() {
        let (stream, peer) = &conns[i];
        let found = peers.identify(*peer, stream.local_addr().unwrap()).unwrap();
        let want = format!("bench::many$t{i}");
        assert_eq!(found.test.unwrap().test, want, "child {}", child.id());
    }
    for (what, mut times) in [
        ("the run's first connection (the tree walked)", walk),
        (
            "a new process's first connection (its parent's children)",
            new,
        ),
        ("a known process's next connection", known),
    ] {
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        println!(
            "{what}, among {PROCESSES} test processes: median {:.0} µs, p99 {:.0} µs, min {:.0} µs ({} identifications)",
            at(0.5),
            at(0.99),
            times[0],
            times.len()
        );
    }
    drop(conns);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("identifying a connection's process needs Linux");
}
