//! The OS barriers around a child (README, "Code mode: the sandbox"), prepared in the parent and applied in
//! `pre_exec` between fork and exec.
//!
//! Everything that allocates (the Landlock ruleset, the seccomp programs, the rlimit
//! values) is built before the fork; inside `pre_exec` only raw system calls run, in the
//! order measured to work on Linux 6.x here: setsid; rlimits; unshare; the task limit; the channel to fd 3
//! and every other fd close-on-exec; parent-death signal; no-new-privileges; Landlock;
//! seccomp last (it forbids what the steps before it need).

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, path_beneath_rules,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::Serialize;

use super::policy::SandboxPolicy;

/// A barrier, serialized (in `doctor --json`) and shown by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "&'static str")]
pub enum Barrier {
    ProcessGroup,
    ParentDeathSignal,
    NoNewPrivileges,
    Rlimits,
    AddressSpace,
    NetworkNamespace,
    Landlock,
    Seccomp,
}

impl Barrier {
    /// The barriers a host may refuse, in the order calibration tries starting without each.
    pub const REFUSABLE: [Barrier; 4] = [
        Barrier::AddressSpace,
        Barrier::NetworkNamespace,
        Barrier::Landlock,
        Barrier::Seccomp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Barrier::ProcessGroup => "process group (setsid)",
            Barrier::ParentDeathSignal => "parent-death signal",
            Barrier::NoNewPrivileges => "no-new-privileges",
            Barrier::Rlimits => "rlimits",
            Barrier::AddressSpace => "address space",
            Barrier::NetworkNamespace => "network namespace",
            Barrier::Landlock => "landlock",
            Barrier::Seccomp => "seccomp",
        }
    }
}

impl From<Barrier> for &'static str {
    fn from(b: Barrier) -> Self {
        b.name()
    }
}

impl std::fmt::Display for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One barrier and whether it is applied on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BarrierStatus {
    pub name: Barrier,
    pub applied: bool,
    pub detail: String,
}

/// What to apply in the child.
pub struct Prepared {
    setsid: bool,
    pdeathsig: bool,
    /// This process, the child's parent: the child checks it still is once its
    /// parent-death signal is set.
    parent: libc::pid_t,
    no_new_privs: bool,
    unshare_flags: Option<libc::c_int>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// RLIMIT_NPROC, set after the unshare (only with a user namespace).
    tasks: Option<u64>,
    landlock: Option<RulesetCreated>,
    seccomp: Vec<BpfProgram>,
}

/// Builds the seccomp programs and the Landlock ruleset, and reports each barrier.
pub struct Plan {
    pub statuses: Vec<BarrierStatus>,
    seccomp: Vec<BpfProgram>,
    landlock_paths: Vec<PathBuf>,
    landlock_abi: i32,
    policy: SandboxPolicy,
}

fn landlock_abi() -> i32 {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI.
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: the documented way to query the ABI: no pointers are passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 { 0 } else { r as i32 }
}

impl Plan {
    pub fn new(policy: &SandboxPolicy, node: &Path) -> Self {
        let b = &policy.barriers;
        let mut statuses = Vec::new();
        let mut on = |name: Barrier, applied: bool, detail: String| {
            statuses.push(BarrierStatus {
                name,
                applied,
                detail,
            })
        };
        on(
            Barrier::ProcessGroup,
            b.setsid,
            "the whole group is killed after every run".into(),
        );
        on(
            Barrier::ParentDeathSignal,
            b.parent_death_signal,
            "SIGKILL when the parent dies".into(),
        );
        on(
            Barrier::NoNewPrivileges,
            b.no_new_privs,
            "PR_SET_NO_NEW_PRIVS".into(),
        );
        on(
            Barrier::Rlimits,
            true,
            format!(
                "files {}, file size {}, core {}, CPU seconds = 8 x deadline + 1 + {}, tasks {} (in the child's user namespace; not binding on a root host)",
                policy.rlimits.nofile,
                policy.rlimits.fsize,
                policy.rlimits.core,
                policy.rlimits.cpu_margin_s,
                policy.rlimits.tasks
            ),
        );
        on(
            Barrier::AddressSpace,
            policy.rlimits.address_space_mib > 0,
            format!(
                "RLIMIT_AS {} MiB: bounds ArrayBuffer memory, which the heap cap does not",
                policy.rlimits.address_space_mib
            ),
        );
        on(
            Barrier::NetworkNamespace,
            b.network_namespace,
            "CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC: no network, no other process's IPC objects, and no capability outside the child's own user namespace, root's included".into(),
        );
        let abi = landlock_abi();
        let landlock_ok = b.landlock && abi >= 1;
        on(
            Barrier::Landlock,
            landlock_ok,
            if !b.landlock {
                "off in the policy".into()
            } else if abi == 0 {
                "the kernel has no Landlock".into()
            } else {
                format!(
                    "ABI {abi}: read/execute node and its libraries only{}{}",
                    if abi >= 4 {
                        ", no TCP bind/connect"
                    } else {
                        ""
                    },
                    if abi >= 6 {
                        ", signals and abstract sockets scoped"
                    } else {
                        ""
                    }
                )
            },
        );
        let (seccomp, seccomp_detail) = if b.seccomp {
            match seccomp_programs(&b.seccomp_deny) {
                Ok(p) => (
                    p,
                    format!(
                        "{} system calls refused; clone only for threads",
                        b.seccomp_deny.len()
                    ),
                ),
                Err(e) => (Vec::new(), format!("cannot build the filter: {e}")),
            }
        } else {
            (Vec::new(), "off in the policy".into())
        };
        on(
            Barrier::Seccomp,
            b.seccomp && !seccomp.is_empty(),
            seccomp_detail,
        );
        let mut landlock_paths: Vec<PathBuf> = b
            .landlock_read
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        landlock_paths.push(node.to_path_buf());
        Plan {
            statuses,
            seccomp,
            landlock_paths,
            landlock_abi: abi,
            policy: policy.clone(),
        }
    }

    /// Marks a barrier as not applied, with the reason (after a spawn showed the host
    /// refuses it).
    pub fn disable(&mut self, name: Barrier, why: String) {
        for s in &mut self.statuses {
            if s.name == name {
                s.applied = false;
                s.detail = why.clone();
            }
        }
    }

    pub fn is_applied(&self, name: Barrier) -> bool {
        self.statuses.iter().any(|s| s.name == name && s.applied)
    }

    /// Everything for one spawn. Allocates: call before the fork. A Landlock ruleset that
    /// cannot be built now fails the spawn: the barrier was calibrated as applied, and a
    /// child must not silently start without it.
    ///
    /// `blob` is the startup snapshot this child starts from, opened by the caller: the
    /// child may read that file, the inode it opened and nothing else by its name. A rule
    /// made from the path was opened again at each spawn, following links, so a link put
    /// at the blob's path made every later child's rule allow the whole filesystem
    /// (sandbox round 28 F1).
    pub fn prepare(
        &self,
        cpu_seconds: u64,
        blob: Option<&std::fs::File>,
    ) -> Result<Prepared, String> {
        let b = &self.policy.barriers;
        let r = &self.policy.rlimits;
        let landlock = if self.is_applied(Barrier::Landlock) {
            Some(
                self.ruleset(blob)
                    .map_err(|e| format!("cannot build the Landlock ruleset: {e}"))?,
            )
        } else {
            None
        };
        // A user namespace for root too: with only a network namespace, a child of a root
        // host kept every capability in the host's namespaces (reboot, sethostname, a
        // host-wide fanotify, real-time scheduling) for native code to use (review 11 F5).
        // Its uid is mapped to nothing there, so after exec it has no capability at all.
        // And an IPC namespace: the host's let native code in a child read and write another
        // process's 0600 SysV shared memory and queues of the same uid (review 12).
        let unshare_flags = self
            .is_applied(Barrier::NetworkNamespace)
            .then_some(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWIPC);
        Ok(Prepared {
            setsid: b.setsid,
            pdeathsig: b.parent_death_signal,
            parent: crate::process::this_process(),
            no_new_privs: b.no_new_privs,
            unshare_flags,
            tasks: unshare_flags.map(|_| r.tasks),
            rlimits: {
                let mut limits = vec![
                    (libc::RLIMIT_NOFILE, r.nofile),
                    (libc::RLIMIT_FSIZE, r.fsize),
                    (libc::RLIMIT_CORE, r.core),
                    // Queued signals are counted per user: a child took all 96,362 of its
                    // user's (review 13).
                    (libc::RLIMIT_SIGPENDING, 64),
                    (libc::RLIMIT_CPU, cpu_seconds + r.cpu_margin_s),
                ];
                if self.is_applied(Barrier::AddressSpace) {
                    limits.push((libc::RLIMIT_AS, r.address_space_mib * 1024 * 1024));
                }
                limits
            },
            landlock,
            seccomp: if self.is_applied(Barrier::Seccomp) {
                self.seccomp.clone()
            } else {
                Vec::new()
            },
        })
    }

    fn ruleset(
        &self,
        blob: Option<&std::fs::File>,
    ) -> Result<RulesetCreated, landlock::RulesetError> {
        let abi = match self.landlock_abi {
            1 => ABI::V1,
            2 => ABI::V2,
            3 => ABI::V3,
            4 => ABI::V4,
            5 => ABI::V5,
            _ => ABI::V6,
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))?;
        if self.landlock_abi >= 4 {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if self.landlock_abi >= 6 {
            ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
        }
        let created = ruleset.create()?.add_rules(path_beneath_rules(
            &self.landlock_paths,
            AccessFs::from_read(abi),
        ))?;
        match blob {
            Some(file) => created.add_rule(PathBeneath::new(
                file,
                AccessFs::from_read(abi) & AccessFs::from_file(abi),
            )),
            None => Ok(created),
        }
    }
}

impl Prepared {
    /// Applies the barriers to the calling (child) process, `channel` becoming fd 3.
    ///
    /// # Safety
    /// Call only between fork and exec (in `pre_exec`): it changes process-wide state.
    pub unsafe fn apply(&mut self, channel: RawFd) -> std::io::Result<()> {
        let check = |r: libc::c_int| {
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // SAFETY (all blocks): raw system calls on this process, with valid arguments.
        unsafe {
            if self.setsid {
                check(libc::setsid())?;
            }
            for &(resource, value) in &self.rlimits {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                check(libc::setrlimit(resource, &limit))?;
            }
            if let Some(flags) = self.unshare_flags {
                check(libc::unshare(flags))?;
            }
            // After the unshare, not before: the kernel counts RLIMIT_NPROC per user
            // namespace and checks every level up, each against the limit its creator had
            // when it made the namespace. Set now, it bounds the tasks of this child's own
            // namespace (its threads) and leaves the user's count in the host's namespace
            // to the host's limit; set before, it would have been checked against every
            // process of the user.
            if let Some(tasks) = self.tasks {
                let limit = libc::rlimit {
                    rlim_cur: tasks,
                    rlim_max: tasks,
                };
                check(libc::setrlimit(libc::RLIMIT_NPROC, &limit))?;
            }
        }
        // Before the channel goes to fd 3: the ruleset is an fd of its own, and when fd 3
        // was free in the parent it *is* fd 3; restricting after the dup2 then handed
        // Landlock the socket (EINVAL), which is how spares failed to start in a test
        // process that had closed fd 3. Consuming the ruleset here closes it first.
        if let Some(ruleset) = self.landlock.take() {
            ruleset
                .restrict_self()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        // SAFETY (all blocks): raw system calls on this process, with valid arguments.
        unsafe {
            if channel == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                check(libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
            } else {
                check(libc::dup2(channel, 3))?;
            }
            // Every fd above 3 closes at exec: the child otherwise inherits whatever the
            // parent's own parent left open. (Closing them here would close the pipe std
            // uses to report exec errors.)
            let r = libc::syscall(
                libc::SYS_close_range,
                4u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if self.pdeathsig {
                crate::process::die_with_parent(self.parent)?;
            }
            if self.no_new_privs {
                check(libc::prctl(
                    libc::PR_SET_NO_NEW_PRIVS,
                    1 as libc::c_ulong,
                    0,
                    0,
                    0,
                ))?;
            }
        }
        for program in &self.seccomp {
            seccompiler::apply_filter(program).map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Ok(())
    }
}

/// Two programs: the denied calls and thread-less `clone` with EPERM, and `clone3` with
/// ENOSYS (so glibc falls back to `clone`, which the first program then checks).
fn seccomp_programs(deny: &[String]) -> Result<Vec<BpfProgram>, String> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("{e:?}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for name in deny {
        let nr = syscall_number(name).ok_or_else(|| format!("unknown system call `{name}`"))?;
        rules.insert(nr, Vec::new());
    }
    let no_thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .map_err(|e| e.to_string())?;
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![no_thread]).map_err(|e| e.to_string())?],
    );
    // Limits of another process: allowed by the kernel between processes of one uid
    // whatever their namespaces, so native code in a child lowered its own host's
    // RLIMIT_AS and killed it (review 12). Node sets only its own (pid 0).
    let other_process = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)
        .map_err(|e| e.to_string())?;
    rules.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![other_process]).map_err(|e| e.to_string())?],
    );
    // The same for priority, scheduling, CPU affinity and I/O priority: a non-root host's
    // child reniced, idled and pinned its own host and every process of its user, for
    // good (review 13). Each on the caller itself (id 0) stays allowed.
    let by_id = |arg: u8| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    for nr in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(nr, vec![by_id(0)?]);
    }
    // setpriority(which, who) and ioprio_set(which, who): anything but the caller's own
    // process (which 0 = PRIO_PROCESS / IOPRIO_WHO_PROCESS 1, who 0).
    let which_not = |value: u64| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    rules.insert(libc::SYS_setpriority, vec![which_not(0)?, by_id(1)?]);
    rules.insert(libc::SYS_ioprio_set, vec![which_not(1)?, by_id(1)?]);
    // Undoing its own parent-death signal: a child then outlived a host killed with
    // SIGKILL, asleep (so RLIMIT_CPU never came) and holding what it held (review 15).
    // Enlarging a pipe: 30 pipes of 1 MiB per child took the user's pipe-buffer quota, and
    // every other process of the user got 8 KiB pipes it could not enlarge (review 15).
    // Node does neither.
    let arg_is = |arg: u8, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    rules.insert(
        libc::SYS_prctl,
        vec![arg_is(0, crate::process::DEATH_SIGNAL_OPTION as u64)?],
    );
    rules.insert(libc::SYS_fcntl, vec![arg_is(1, libc::F_SETPIPE_SZ as u64)?]);
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let mut programs = vec![
        eperm
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
        clone3
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
    ];
    #[cfg(target_arch = "x86_64")]
    programs.push(no_x32());
    Ok(programs)
}

/// Every x32 call refused with EPERM. An x32 call is the x86-64 architecture with bit 30 set
/// in its number, and seccompiler checks only the architecture: on a kernel with x32
/// enabled, `socket | 0x40000000` would have passed every rule above (review 15; this
/// kernel has no x32, so the calls failed with ENOSYS anyway). Node makes none.
#[cfg(target_arch = "x86_64")]
fn no_x32() -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_ABS_W: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    const RET_ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        // seccomp_data: the number at offset 0, the architecture at 4.
        op(LD_ABS_W, 0, 0, 4),
        // Another architecture is the other programs' business: allow here.
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(LD_ABS_W, 0, 0, 0),
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, RET_ALLOW),
    ]
}

fn syscall_number(name: &str) -> Option<i64> {
    use libc::*;
    Some(match name {
        "socket" => SYS_socket,
        "socketpair" => SYS_socketpair,
        "ptrace" => SYS_ptrace,
        "process_vm_readv" => SYS_process_vm_readv,
        "process_vm_writev" => SYS_process_vm_writev,
        "mount" => SYS_mount,
        "umount2" => SYS_umount2,
        "unshare" => SYS_unshare,
        "setns" => SYS_setns,
        "bpf" => SYS_bpf,
        "perf_event_open" => SYS_perf_event_open,
        "keyctl" => SYS_keyctl,
        "add_key" => SYS_add_key,
        "request_key" => SYS_request_key,
        "userfaultfd" => SYS_userfaultfd,
        "io_uring_setup" => SYS_io_uring_setup,
        "io_uring_enter" => SYS_io_uring_enter,
        "io_uring_register" => SYS_io_uring_register,
        "kexec_load" => SYS_kexec_load,
        "init_module" => SYS_init_module,
        "finit_module" => SYS_finit_module,
        "pivot_root" => SYS_pivot_root,
        "chroot" => SYS_chroot,
        "execveat" => SYS_execveat,
        #[cfg(target_arch = "x86_64")]
        "fork" => SYS_fork,
        #[cfg(target_arch = "x86_64")]
        "vfork" => SYS_vfork,
        "execve" => SYS_execve,
        "connect" => SYS_connect,
        "bind" => SYS_bind,
        "pidfd_open" => SYS_pidfd_open,
        "pidfd_getfd" => SYS_pidfd_getfd,
        "pidfd_send_signal" => SYS_pidfd_send_signal,
        "process_madvise" => SYS_process_madvise,
        "kcmp" => SYS_kcmp,
        "migrate_pages" => SYS_migrate_pages,
        "move_pages" => SYS_move_pages,
        "inotify_init" => SYS_inotify_init,
        "inotify_init1" => SYS_inotify_init1,
        "inotify_add_watch" => SYS_inotify_add_watch,
        "fanotify_init" => SYS_fanotify_init,
        "timer_create" => SYS_timer_create,
        "rt_sigqueueinfo" => SYS_rt_sigqueueinfo,
        "rt_tgsigqueueinfo" => SYS_rt_tgsigqueueinfo,
        "shmget" => SYS_shmget,
        "shmat" => SYS_shmat,
        "shmctl" => SYS_shmctl,
        "shmdt" => SYS_shmdt,
        "msgget" => SYS_msgget,
        "msgsnd" => SYS_msgsnd,
        "msgrcv" => SYS_msgrcv,
        "msgctl" => SYS_msgctl,
        "semget" => SYS_semget,
        "semop" => SYS_semop,
        "semtimedop" => SYS_semtimedop,
        "semctl" => SYS_semctl,
        "mq_open" => SYS_mq_open,
        "mq_unlink" => SYS_mq_unlink,
        "mq_timedsend" => SYS_mq_timedsend,
        "mq_timedreceive" => SYS_mq_timedreceive,
        "mq_notify" => SYS_mq_notify,
        "mq_getsetattr" => SYS_mq_getsetattr,
        "vmsplice" => SYS_vmsplice,
        "io_setup" => SYS_io_setup,
        "io_destroy" => SYS_io_destroy,
        "io_submit" => SYS_io_submit,
        "io_cancel" => SYS_io_cancel,
        "io_getevents" => SYS_io_getevents,
        "landlock_create_ruleset" => SYS_landlock_create_ruleset,
        "landlock_add_rule" => SYS_landlock_add_rule,
        "landlock_restrict_self" => SYS_landlock_restrict_self,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{Barrier, BarrierStatus};

    #[test]
    fn a_barrier_is_serialized_and_shown_by_its_name() {
        let status = BarrierStatus {
            name: Barrier::ProcessGroup,
            applied: true,
            detail: "d".into(),
        };
        assert_eq!(
            serde_json::to_string(&status).unwrap(),
            r#"{"name":"process group (setsid)","applied":true,"detail":"d"}"#
        );
        assert_eq!(Barrier::NetworkNamespace.to_string(), "network namespace");
    }

    /// `program` with `args`, under the default policy's seccomp filters, as native code in
    /// a child would be.
    fn under_the_filters(program: &str, args: &[&str]) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        let p = super::super::policy::SandboxPolicy::default_policy().unwrap();
        let programs = super::seccomp_programs(&p.barriers.seccomp_deny).unwrap();
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        // SAFETY: between fork and exec, only syscalls.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for program in &programs {
                    seccompiler::apply_filter(program)
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                }
                Ok(())
            });
        }
        cmd.output()
            .unwrap_or_else(|e| panic!("{program} (util-linux) runs: {e}"))
    }

    /// Native code in a child lowered its own host's limits (prlimit64 is allowed between
    /// processes of one uid, namespaces or not): the filter refuses another process's
    /// limits, read or set, and keeps the child's own (review 12).
    #[test]
    fn another_process_s_limits_are_refused_and_its_own_are_kept() {
        let own = under_the_filters("prlimit", &["--nofile"]);
        assert!(own.status.success(), "{own:?}");
        let parent = std::process::id().to_string();
        let other = under_the_filters("prlimit", &["--pid", &parent, "--nofile"]);
        assert!(!other.status.success(), "{other:?}");
        assert!(
            String::from_utf8_lossy(&other.stderr).contains("not permitted"),
            "{other:?}"
        );
        // Nor another process's priority (review 13: a child reniced its own host).
        let renice = under_the_filters("renice", &["-n", "0", "-p", &parent]);
        assert!(!renice.status.success(), "{renice:?}");
    }

    /// SysV IPC objects hold memory the address-space limit does not count: a child held
    /// 6 GiB of shared memory past its 1.5 GiB RLIMIT_AS, and 500 MiB of kernel memory in
    /// message queues (review 14). Each kind is refused; the host's own still work.
    #[test]
    fn sysv_shared_memory_queues_and_semaphores_are_refused() {
        for (kind, flag) in [
            ("shared memory", "-M"),
            ("queue", "-Q"),
            ("semaphore", "-S"),
        ] {
            let args: &[&str] = if flag == "-M" {
                &[flag, "4096"]
            } else if flag == "-S" {
                &[flag, "1"]
            } else {
                &[flag]
            };
            let made = under_the_filters("ipcmk", args);
            assert!(!made.status.success(), "{kind}: {made:?}");
            assert!(
                String::from_utf8_lossy(&made.stderr).contains("not permitted"),
                "{kind}: {made:?}"
            );
        }
        let listed = std::process::Command::new("ipcs").output().unwrap();
        assert!(listed.status.success(), "{listed:?}");
    }

    /// Review 15: pages pinned by vmsplice outside every limit (3 GiB held by a child of
    /// 728 KB RSS), a parent-death signal undone (a child outlived its killed host), pipes
    /// enlarged to take the user's pipe-buffer quota, x32 numbers past every rule (on kernels
    /// with x32). Each refused; a plain pipe and a plain call still work.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vmsplice_aio_landlock_the_death_signal_pipes_and_x32_calls_are_refused() {
        let script = r#"
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(4096)
iov = iovec(ctypes.cast(buf, ctypes.c_void_p), 4096)
n = libc.vmsplice(w, ctypes.byref(iov), 1, 0)
print("vmsplice", n, os.strerror(ctypes.get_errno()))
n = libc.prctl(1, 0, 0, 0, 0)
print("pdeathsig", n, os.strerror(ctypes.get_errno()))
ctx = ctypes.c_ulong(0)
n = libc.syscall(206, 1, ctypes.byref(ctx))
print("io_setup", n, os.strerror(ctypes.get_errno()))
n = libc.syscall(444, None, 0, 1)
print("landlock", n, os.strerror(ctypes.get_errno()))
n = libc.syscall(0x40000000 | 39)
print("x32 getpid", n, os.strerror(ctypes.get_errno()))
print("getpid", libc.syscall(39) == os.getpid())
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    print("setpipe ok")
except OSError as e:
    print("setpipe", e.strerror)
os.write(w, b"x")
print("pipe", os.read(r, 1))
"#;
        // The interpreter itself: `python3` may be a shim that forks (pyenv).
        let found = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs");
        let python = String::from_utf8_lossy(&found.stdout).trim().to_string();
        let out = under_the_filters(&python, &["-c", script]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        for line in [
            "vmsplice -1 Operation not permitted",
            "pdeathsig -1 Operation not permitted",
            // Without the filter this kernel says ENOSYS ("Function not implemented").
            "x32 getpid -1 Operation not permitted",
            "io_setup -1 Operation not permitted",
            "landlock -1 Operation not permitted",
            "getpid True",
            "setpipe Operation not permitted",
            "pipe b'x'",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }

    #[test]
    fn the_default_filter_compiles() {
        let p = super::super::policy::SandboxPolicy::default_policy().unwrap();
        let programs = super::seccomp_programs(&p.barriers.seccomp_deny).unwrap();
        assert_eq!(
            programs.len(),
            if cfg!(target_arch = "x86_64") { 3 } else { 2 }
        );
        assert!(super::syscall_number("no_such_call").is_none());
    }
}
