//! Compiling a component in a child process, so that the agent's own memory
//! never carries a compile.
//!
//! Compiling a JavaScript or Python component takes seconds and hundreds of
//! MiB; done in the agent, that peak sets the pod's memory limit on every
//! node, and an agent OOM-killed mid-compile restarts and compiles again. So
//! the agent runs `vigil policy compile` (hidden) as a child: the component
//! goes in on stdin, the child limits its own memory (`RLIMIT_DATA`), compiles
//! with the same engine configuration and writes the artifact into the shared
//! cache, and the agent maps it from there. A child that runs out of memory
//! or time fails that version only, like any component that does not load.
//!
//! The child's exit status is the protocol: 0 stored (its peak resident
//! memory in KiB on stdout, logged), [`INVALID_EXIT`] the component does not
//! compile (its message on stderr), anything else a failure of the compile
//! itself.

use crate::base::digest::Digest;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use thiserror::Error;

/// The child's exit code for a component that does not compile.
pub(crate) const INVALID_EXIT: i32 = 2;
/// The most of the child's stderr kept for an error message.
const STDERR_KEPT: usize = 4096;

/// How the agent compiles components: which program, within what limits.
#[derive(Debug, Clone)]
pub struct ChildCompiler {
    /// The `vigil` binary to run as `PROGRAM policy compile`.
    pub program: PathBuf,
    /// The child's memory limit, in bytes.
    pub memory_bytes: u64,
    /// How long a compile may take before the child is killed.
    pub deadline: Duration,
}

/// Why a compile in a child process failed.
#[derive(Debug, Error)]
pub enum CompileError {
    /// The child could not be started or talked to.
    #[error("cannot run the compiler {program}")]
    Spawn {
        /// The program run as the compiler (this very binary).
        program: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The child ran past its deadline and was killed.
    #[error("compiling took longer than its deadline of {} s and was stopped", deadline.as_secs_f64())]
    Deadline {
        /// How long one compile may take before it is stopped.
        deadline: Duration,
    },
    /// The child ran out of memory.
    #[error("compiling needed more than its memory limit of {limit_mib} MiB ({detail})")]
    OutOfMemory {
        /// The limit, in MiB.
        limit_mib: u64,
        /// What the child said.
        detail: String,
    },
    /// The artifact could not be stored in, or loaded from, the cache.
    #[error("its precompiled artifact cannot be kept: {0}")]
    NotCached(String),
    /// The child failed some other way.
    #[error("the compiler process failed ({status}): {detail}")]
    Failed {
        /// How it ended.
        status: ExitStatus,
        /// What it said.
        detail: String,
    },
}

/// How a child's compile ended, for the caller to turn into a load result.
#[derive(Debug)]
pub enum Compiled {
    /// The artifact is in the cache.
    Stored,
    /// The component does not compile; the child's message.
    Invalid(String),
}

impl ChildCompiler {
    /// Compiles `bytes` (whose digest is `digest`) in a child process that
    /// stores the artifact in `cache_dir`. Blocks until the child ends or its
    /// deadline passes.
    ///
    /// # Errors
    /// The child cannot be run, runs out of memory or time, or fails.
    pub fn compile(
        &self,
        cache_dir: &Path,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<Compiled, CompileError> {
        let spawn_error = |source| CompileError::Spawn {
            program: self.program.clone(),
            source,
        };
        let mut child = Command::new(&self.program)
            .args(["policy", "compile", "--digest", &digest.hex()])
            .arg("--memory-limit-bytes")
            .arg(self.memory_bytes.to_string())
            .arg("--cache-dir")
            .arg(cache_dir)
            // Its last words are the message; a backtrace would bury them.
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_error)?;
        let started = std::time::Instant::now();
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let (ended, (said, peak)) = std::thread::scope(|scope| {
            // The pipes are served beside the wait: a child that stops
            // reading, or writes much, must not stall the deadline. Its
            // stdout is one short line at the end.
            let io = scope.spawn(move || {
                // A child that dies early closes its stdin; its status says why.
                let _ = stdin.write_all(bytes);
                drop(stdin);
                let said = tail(&mut stderr, STDERR_KEPT);
                let mut peak = String::new();
                let _ = stdout.read_to_string(&mut peak);
                (said, peak)
            });
            let ended = wait_or_kill(&mut child, self.deadline);
            (ended, io.join().unwrap_or_default())
        });
        let said = String::from_utf8_lossy(&said);
        let detail = last_words(&said);
        let status = match ended.map_err(spawn_error)? {
            Some(status) => status,
            None => {
                return Err(CompileError::Deadline {
                    deadline: self.deadline,
                });
            }
        };
        match status.code() {
            Some(0) => {
                tracing::info!(
                    component = %digest,
                    seconds = started.elapsed().as_secs_f64(),
                    peak_rss_mib = peak.trim().parse::<u64>().ok().map(|kib| kib >> 10),
                    "compiled in a child process"
                );
                Ok(Compiled::Stored)
            }
            Some(INVALID_EXIT) => Ok(Compiled::Invalid(detail)),
            _ => match out_of_memory(&said) {
                Some(detail) => Err(CompileError::OutOfMemory {
                    limit_mib: self.memory_bytes >> 20,
                    detail: detail.to_owned(),
                }),
                None => Err(CompileError::Failed { status, detail }),
            },
        }
    }
}

/// How often a child is checked on where the kernel has no pidfds (before
/// Linux 5.3, or a seccomp profile that refuses `pidfd_open`).
const POLL_WITHOUT_PIDFD: Duration = Duration::from_millis(10);

/// Waits for `child` to end, at most `deadline`; past it, kills and reaps
/// it and answers `None`. The child is only ever signalled while unreaped,
/// so the signal cannot reach a recycled pid. The wait is a poll on the
/// child's pidfd, or a check every [`POLL_WITHOUT_PIDFD`] without one.
fn wait_or_kill(child: &mut Child, deadline: Duration) -> std::io::Result<Option<ExitStatus>> {
    let pidfd = pidfd(child);
    wait_or_kill_with(child, pidfd.as_ref(), deadline)
}

/// The child's pidfd, if the kernel gives one.
fn pidfd(child: &Child) -> Option<std::os::fd::OwnedFd> {
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let pid = i32::try_from(child.id()).ok().and_then(Pid::from_raw)?;
    pidfd_open(pid, PidfdFlags::empty()).ok()
}

fn wait_or_kill_with(
    child: &mut Child,
    pidfd: Option<&std::os::fd::OwnedFd>,
    deadline: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let until = std::time::Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        match pidfd {
            Some(pidfd) => {
                let timeout = Timespec::try_from(left).map_err(std::io::Error::other)?;
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                match poll(&mut fds, Some(&timeout)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(errno) => return Err(errno.into()),
                }
            }
            None => std::thread::sleep(left.min(POLL_WITHOUT_PIDFD)),
        }
    }
}

/// The last `keep` bytes `reader` gives before its end, holding no more
/// than twice that at any time: a child logging without bound costs the
/// agent nothing.
fn tail(reader: &mut impl Read, keep: usize) -> Vec<u8> {
    let mut kept = Vec::with_capacity(2 * keep);
    let mut chunk = [0; 4096];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => kept.extend_from_slice(&chunk[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    let start = kept.len().saturating_sub(keep);
    kept.split_off(start)
}

/// What the child wrote to stderr, for an error message: its error line,
/// without the `error: ` prefix `main` gives it, or all of it.
fn last_words(said: &str) -> String {
    let text = said.trim();
    match text.lines().last().and_then(|l| l.strip_prefix("error: ")) {
        Some(message) => message.to_owned(),
        None if text.is_empty() => "it said nothing".to_owned(),
        None => text.to_owned(),
    }
}

/// This process's peak resident memory in KiB, as the child reports it;
/// `None` if `/proc/self/status` cannot be read or has no `VmHWM`.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The line where the child says an allocation failed: Rust's abort
/// message, or an OS allocation refusal (ENOMEM) reported as an error.
fn out_of_memory(said: &str) -> Option<&str> {
    said.lines()
        .find(|l| l.contains("memory allocation of") || l.contains("os error 12"))
        .map(str::trim)
}

/// Why the child compiler cannot take its component.
#[derive(Debug, Error)]
pub(crate) enum ChildError {
    /// It cannot be tied to the agent's life.
    #[error("cannot tie the compiler to the agent's life")]
    DeathSignal(#[source] std::io::Error),
    /// Its memory cannot be limited.
    #[error("cannot limit the compiler's memory")]
    Limit(#[source] std::io::Error),
    /// Stdin cannot be read.
    #[error("cannot read the component from stdin")]
    Stdin(#[source] std::io::Error),
    /// Stdin holds another component than the one asked for.
    #[error("received component {found}, not the {asked} asked for")]
    OtherComponent {
        /// The digest of what was received.
        found: String,
        /// The digest asked for.
        asked: String,
    },
}

/// The child's side: ends this process with its parent, offers it first to
/// the OOM killer, limits its memory to `memory_bytes`, reads the component
/// from stdin and checks it is the one asked for.
///
/// # Errors
/// The limit cannot be set, stdin cannot be read, or it holds another component.
pub(crate) fn child_input(digest: &str, memory_bytes: u64) -> Result<Vec<u8>, ChildError> {
    use rustix::process::{Resource, Rlimit, Signal, set_parent_process_death_signal, setrlimit};
    // An agent that dies (or is killed) takes its compile with it.
    set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| ChildError::DeathSignal(e.into()))?;
    // Sharing the agent's cgroup, the child is what its OOM killer should
    // pick. Best effort: raising one's own score needs no privilege, and
    // without procfs the limit below still holds.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let limit = Rlimit {
        current: Some(memory_bytes),
        maximum: Some(memory_bytes),
    };
    setrlimit(Resource::Data, limit).map_err(|e| ChildError::Limit(e.into()))?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(ChildError::Stdin)?;
    let found = Digest::of(&bytes).hex();
    if found != digest {
        return Err(ChildError::OtherComponent {
            found,
            asked: digest.to_owned(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `sh -c script` and waits for it as the compiler's child is
    /// waited for, with and without a pidfd.
    fn waited(script: &str, deadline: Duration) -> [Option<ExitStatus>; 2] {
        [true, false].map(|with_pidfd| {
            let mut child = Command::new("sh")
                .args(["-c", script])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            let pidfd = if with_pidfd { pidfd(&child) } else { None };
            assert_eq!(pidfd.is_some(), with_pidfd, "this kernel gives pidfds");
            wait_or_kill_with(&mut child, pidfd.as_ref(), deadline).unwrap()
        })
    }

    #[test]
    fn a_child_is_waited_for_until_its_deadline_then_killed() {
        for ended in waited("exit 3", Duration::from_secs(60)) {
            assert_eq!(ended.and_then(|s| s.code()), Some(3));
        }
        // `read` on a pipe nobody writes to (still open: the `Child` holds
        // it) never returns: only the kill ends it.
        for ended in waited("read line", Duration::from_millis(50)) {
            assert_eq!(ended, None);
        }
    }

    #[test]
    fn only_the_end_of_what_the_child_says_is_kept() {
        let said: Vec<u8> = (0..100_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let kept = tail(&mut said.as_slice(), 64);
        assert_eq!(kept, said[said.len() - 64..]);
        assert_eq!(tail(&mut &b"short"[..], 64), b"short");
    }

    #[test]
    fn the_childs_message_is_its_last_error_line() {
        assert_eq!(
            last_words("INFO something\nerror: invalid component: bad section\n"),
            "invalid component: bad section"
        );
        assert_eq!(last_words(""), "it said nothing");
        assert_eq!(last_words("thread panicked\n"), "thread panicked");
        let aborted = "memory allocation of 4096 bytes failed\nstack backtrace:\n\
                       skipping backtrace printing to avoid potential recursion\n";
        assert_eq!(
            out_of_memory(aborted),
            Some("memory allocation of 4096 bytes failed")
        );
        assert!(out_of_memory("error: mmap: Cannot allocate memory (os error 12)").is_some());
        assert_eq!(out_of_memory("error: invalid component"), None);
    }
}
