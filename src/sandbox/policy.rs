//! The sandbox policy file (`sandbox-policy/default.toml`, embedded): values and why.

use serde::Deserialize;

use crate::error::{Error, Result};

const DEFAULT: &str = include_str!("../../sandbox-policy/default.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPolicy {
    pub node: NodePolicy,
    pub limits: Limits,
    pub rlimits: Rlimits,
    pub barriers: BarrierPolicy,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePolicy {
    pub max_old_space_mib: u64,
    pub extra_flags: Vec<String>,
    pub snapshot: bool,
    pub inner_hooks: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_result_bytes: usize,
    pub max_log_bytes: usize,
    pub max_log_lines: usize,
    pub max_bridge_calls: usize,
    pub max_arg_bytes: usize,
    pub max_calls_in_flight: usize,
    pub max_concurrent_runs: usize,
    pub max_code_bytes: usize,
    pub max_frame_bytes: usize,
    pub stderr_tail_chars: usize,
    pub startup_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimits {
    pub address_space_mib: u64,
    pub nofile: u64,
    pub fsize: u64,
    pub core: u64,
    pub cpu_margin_s: u64,
    /// RLIMIT_NPROC, set inside the child's own user namespace (see barriers.rs); older
    /// policy files without it get the default.
    #[serde(default = "default_tasks")]
    pub tasks: u64,
}

fn default_tasks() -> u64 {
    64
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierPolicy {
    pub setsid: bool,
    pub parent_death_signal: bool,
    pub no_new_privs: bool,
    pub network_namespace: bool,
    pub landlock: bool,
    pub landlock_read: Vec<String>,
    pub seccomp: bool,
    pub seccomp_deny: Vec<String>,
}

impl SandboxPolicy {
    /// The embedded default policy.
    pub fn default_policy() -> Result<Self> {
        Self::from_toml(DEFAULT, "sandbox-policy/default.toml")
    }

    pub fn from_toml(text: &str, name: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::BadConfig {
            file: name.into(),
            message: e.message().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_policy_parses() {
        let p = super::SandboxPolicy::default_policy().unwrap();
        assert_eq!(p.limits.max_result_bytes, 1024 * 1024);
        assert!(p.barriers.seccomp_deny.contains(&"socket".to_string()));
        assert!(!p.barriers.seccomp_deny.contains(&"execve".to_string()));
    }
}
