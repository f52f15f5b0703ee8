//! `toolsearch doctor`: what this host gives the sandbox, proven rather than listed.
//!
//! Besides the Node found and each barrier's status, it runs `bridge-js/probe.js` in a
//! child spawned exactly as for a run but without the vm context — as if the guest had
//! escaped it — which tries to read and write a file, connect over TCP to a listener opened
//! here on loopback, send UDP to one, connect to a Unix socket, resolve a name, spawn a
//! process and signal its parent. Each line says blocked or allowed; the listeners confirm
//! what arrived, so a probe cannot report "blocked" for a packet that got through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::barriers::BarrierStatus;
use super::protocol::BridgeMethod;
use super::{Bridge, BridgeFuture, NodeInfo, Sandbox};

const PROBE_JS: &str = include_str!("../../bridge-js/probe.js");

#[derive(Debug, Clone, Serialize)]
pub struct ProbeLine {
    pub attempt: String,
    pub blocked: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub node: NodeInfo,
    pub heap_cap_mib: u64,
    /// The startup snapshot children start from (null: the runtime is given inline).
    pub snapshot: Option<std::path::PathBuf>,
    pub barriers: Vec<BarrierStatus>,
    /// A cold run (spawn, one bridge call, result, reap), milliseconds.
    pub cold_run_ms: Option<f64>,
    pub cold_run_error: Option<String>,
    /// `node -e 0` on the same machine, for comparison.
    pub node_e0_ms: Option<f64>,
    pub probes: Vec<ProbeLine>,
    pub probe_error: Option<String>,
}

impl Report {
    /// Code mode can run: a cold run worked.
    pub fn usable(&self) -> bool {
        self.cold_run_ms.is_some()
    }

    /// Every probe was blocked.
    pub fn all_blocked(&self) -> bool {
        self.probe_error.is_none()
            && !self.probes.is_empty()
            && self.probes.iter().all(|p| p.blocked)
    }
}

/// Answers every bridge call with an empty list: enough to time a round trip.
struct EchoBridge;

impl Bridge for EchoBridge {
    fn call(&self, _: BridgeMethod, _: Vec<Value>, _: CancellationToken) -> BridgeFuture<'_> {
        Box::pin(async { Ok(super::answer(&json!([]))) })
    }
}

pub async fn run(sandbox: &Sandbox) -> Report {
    let started = Instant::now();
    let cold = sandbox
        .run(
            "return await openclaw.tools.search('doctor')",
            Duration::from_secs(10),
            Arc::new(EchoBridge),
        )
        .await;
    let cold_ms = started.elapsed().as_secs_f64() * 1e3;
    let node_e0_ms = {
        let started = Instant::now();
        tokio::process::Command::new(&sandbox.node().path)
            .args(["-e", "0"])
            .env_clear()
            .output()
            .await
            .ok()
            .filter(|o| o.status.success())
            .map(|_| started.elapsed().as_secs_f64() * 1e3)
    };
    let (probes, probe_error) = match probe(sandbox).await {
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    Report {
        node: sandbox.node().clone(),
        heap_cap_mib: sandbox.policy().node.max_old_space_mib,
        snapshot: sandbox.snapshot().map(|p| p.to_path_buf()),
        barriers: sandbox.barriers().to_vec(),
        cold_run_ms: cold.outcome.is_ok().then_some(cold_ms),
        cold_run_error: cold.outcome.err().map(|e| e.to_string()),
        node_e0_ms,
        probes,
        probe_error,
    }
}

async fn probe(sandbox: &Sandbox) -> Result<Vec<ProbeLine>, String> {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot open a TCP listener: {e}"))?;
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    // A fresh folder of this process's own: a guessable name another user made first would
    // hold the listener's socket.
    let dir = crate::cache::private_temp_dir("toolsearch-doctor-").map_err(|e| e.to_string())?;
    let unix_path = dir.join("probe.sock");
    let unix = tokio::net::UnixListener::bind(&unix_path).map_err(|e| e.to_string())?;
    let target = json!({
        "tcp": tcp.local_addr().map_err(|e| e.to_string())?.port(),
        "udp": udp.local_addr().map_err(|e| e.to_string())?.port(),
        "unix": unix_path.to_string_lossy(),
    });
    let tcp_seen = Arc::new(AtomicBool::new(false));
    let udp_seen = Arc::new(AtomicBool::new(false));
    let unix_seen = Arc::new(AtomicBool::new(false));
    let watchers = {
        let (t, u, x) = (tcp_seen.clone(), udp_seen.clone(), unix_seen.clone());
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                tokio::select! {
                    Ok(_) = tcp.accept() => t.store(true, Ordering::SeqCst),
                    Ok(_) = udp.recv_from(&mut buf) => u.store(true, Ordering::SeqCst),
                    Ok(_) = unix.accept() => x.store(true, Ordering::SeqCst),
                }
            }
        })
    };
    let mut child = sandbox
        .spawn_script(PROBE_JS, &[target.to_string()], Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let read = tokio::time::timeout(Duration::from_secs(10), child.read_raw_line(64 * 1024)).await;
    child.kill_and_reap().await;
    // Give the listeners a moment to see late arrivals.
    tokio::time::sleep(Duration::from_millis(50)).await;
    watchers.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let line = match read {
        Ok(Some(line)) => line,
        _ => return Err("the probe child gave no report".into()),
    };
    let results: serde_json::Map<String, Value> = serde_json::from_str(line.trim())
        .map_err(|e| format!("the probe's report is not JSON: {e}"))?;
    let arrived = |name: &str| match name {
        "TCP connect to loopback" => tcp_seen.load(Ordering::SeqCst),
        "UDP send to loopback" => udp_seen.load(Ordering::SeqCst),
        "Unix socket connect" => unix_seen.load(Ordering::SeqCst),
        _ => false,
    };
    Ok(results
        .into_iter()
        .map(|(attempt, v)| {
            let detail = v.as_str().unwrap_or_default().to_string();
            let blocked = detail.starts_with("blocked") && !arrived(&attempt);
            let detail = if arrived(&attempt) && !detail.starts_with("allowed") {
                format!("allowed: the listener received it ({detail})")
            } else {
                detail
            };
            ProbeLine {
                attempt,
                blocked,
                detail,
            }
        })
        .collect())
}
