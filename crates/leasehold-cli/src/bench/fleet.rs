//! The fleet under test: real `leasehold node` processes sharing one fence log, started,
//! signalled and watched by the bench.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tokio::process::{Child, Command};

use super::timeline::{self, Event};
use crate::append_log::unix_ns;

/// A signal the bench sends a node.
#[derive(Debug, Clone, Copy)]
pub enum Signal {
    /// Graceful stop: hand every lease off, then exit.
    Term,
    /// Freeze the process, as a long GC pause or a stalled VM would.
    Stop,
    /// Let a frozen process run again.
    Cont,
}

impl Signal {
    fn number(self) -> rustix::process::Signal {
        match self {
            Signal::Term => rustix::process::Signal::TERM,
            Signal::Stop => rustix::process::Signal::STOP,
            Signal::Cont => rustix::process::Signal::CONT,
        }
    }
}

/// The processes of one run, and what the bench did to them.
pub struct Fleet {
    exe: PathBuf,
    /// `--store` and `--group`, then `node`'s timing flags.
    global: Vec<OsString>,
    node_flags: Vec<OsString>,
    dir: PathBuf,
    run: usize,
    fence_log: PathBuf,
    running: BTreeMap<String, Child>,
    /// Sent SIGTERM and not yet reaped: on their way out, expected to exit.
    leaving: BTreeSet<String>,
    next_name: usize,
    /// Kills, which no node can log.
    marks: Vec<Event>,
}

impl Fleet {
    /// A fleet with no node yet; logs go to `dir`.
    pub fn new(
        exe: PathBuf,
        global: Vec<OsString>,
        node_flags: Vec<OsString>,
        dir: &Path,
        run: usize,
    ) -> Fleet {
        Fleet {
            exe,
            global,
            node_flags,
            dir: dir.to_owned(),
            run,
            fence_log: dir.join(format!("fence-{run}.log")),
            running: BTreeMap::new(),
            leaving: BTreeSet::new(),
            next_name: 1,
            marks: Vec::new(),
        }
    }

    /// A name no node of this run has had.
    pub fn fresh_name(&mut self) -> String {
        let name = format!("n{}", self.next_name);
        self.next_name += 1;
        name
    }

    /// The nodes running now and not on their way out, in name order.
    pub fn running(&self) -> BTreeSet<String> {
        self.running
            .keys()
            .filter(|name| !self.leaving.contains(*name))
            .cloned()
            .collect()
    }

    /// Starts `leasehold node --id <name>`; its stderr goes to `<name>.log` in the log
    /// directory and its stdout to `<name>.<run>.out` (both appended to, so a restarted node
    /// keeps one file).
    pub fn start(&mut self, name: &str) -> anyhow::Result<()> {
        let stderr = append(&self.dir.join(format!("{name}.log")))?;
        let stdout = append(&self.stdout_path(name))?;
        let child = Command::new(&self.exe)
            .args(&self.global)
            .args(["node", "--id", name, "--fence-log"])
            .arg(&self.fence_log)
            .args(&self.node_flags)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {} node", self.exe.display()))?;
        self.running.insert(name.to_owned(), child);
        Ok(())
    }

    /// Where a node of this run writes its standard output. Per run, so that a line of an
    /// earlier run's node of the same name is never taken for this one's.
    fn stdout_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.{}.out", self.run))
    }

    /// The `HOST:PORT` a node said its metrics are served on (`node --metrics-listen` with
    /// port 0 prints the port it got), if it has said so yet; the latest start's if it was
    /// restarted.
    pub fn metrics_address(&self, name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.stdout_path(name)).ok()?;
        text.lines().rev().find_map(|line| {
            let url = line.trim().strip_prefix("metrics listening on http://")?;
            Some(url.strip_suffix("/metrics").unwrap_or(url).to_owned())
        })
    }

    /// Sends `signal` to a running node.
    pub fn signal(&mut self, name: &str, signal: Signal) -> anyhow::Result<()> {
        let pid = self
            .running
            .get(name)
            .and_then(Child::id)
            .with_context(|| format!("node {name} is not running"))?;
        // A child not yet reaped keeps its id, so the signal cannot reach another process.
        let pid = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .context("process id out of range")?;
        rustix::process::kill_process(pid, signal.number())
            .map_err(std::io::Error::from)
            .with_context(|| format!("cannot send {signal:?} to node {name}"))?;
        if let Signal::Term = signal {
            self.leaving.insert(name.to_owned());
        }
        Ok(())
    }

    /// Kills a node outright (SIGKILL), as a crash would, and notes the instant: from then on
    /// it serves nothing. Returns that instant.
    pub async fn kill(&mut self, name: &str) -> anyhow::Result<u128> {
        let mut child = self
            .running
            .remove(name)
            .with_context(|| format!("node {name} is not running"))?;
        self.leaving.remove(name);
        let at = now_ns();
        child.start_kill().context("cannot kill node")?;
        child.wait().await.context("cannot reap killed node")?;
        self.marks.push(Event::killed(name, at));
        Ok(at)
    }

    /// Waits for a node sent SIGTERM to exit, for at most `limit`, then kills it.
    pub async fn wait_exit(&mut self, name: &str, limit: Duration) -> anyhow::Result<()> {
        let mut child = self
            .running
            .remove(name)
            .with_context(|| format!("node {name} is not running"))?;
        self.leaving.remove(name);
        match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => {
                let status = status.context("cannot wait for node")?;
                anyhow::ensure!(
                    status.success(),
                    "node {name} exited with {status}; see {}",
                    self.dir.join(format!("{name}.log")).display()
                );
                Ok(())
            }
            Err(_) => {
                let at = now_ns();
                child.start_kill().ok();
                child.wait().await.ok();
                self.marks.push(Event::killed(name, at));
                anyhow::bail!("node {name} did not exit within {limit:?} of SIGTERM; killed")
            }
        }
    }

    /// Fails if a node that should be running has exited, or one on its way out failed:
    /// its log says why.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.running {
            if let Some(status) = child.try_wait().context("cannot poll node")? {
                if self.leaving.contains(name) && status.success() {
                    continue;
                }
                let log = self.dir.join(format!("{name}.log"));
                let tail = std::fs::read_to_string(&log)
                    .map(|text| last_lines(&text, 5))
                    .unwrap_or_default();
                anyhow::bail!("node {name} exited unexpectedly with {status}:\n{tail}");
            }
        }
        Ok(())
    }

    /// Stops every node gracefully (killing any that does not stop within `limit`).
    pub async fn stop_all(&mut self, limit: Duration) -> anyhow::Result<()> {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in &names {
            self.signal(name, Signal::Cont).ok();
            // One that has already exited is reaped below.
            self.signal(name, Signal::Term).ok();
        }
        let mut first_error = None;
        for name in &names {
            if let Err(error) = self.wait_exit(name, limit).await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Every event so far, in order, and how many log lines were malformed.
    pub fn events(&self) -> anyhow::Result<(Vec<Event>, usize)> {
        let text = match std::fs::read_to_string(&self.fence_log) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot read {}", self.fence_log.display()))
            }
        };
        let (mut events, malformed) = timeline::parse(&text);
        events.extend(self.marks.iter().cloned());
        timeline::sort(&mut events);
        Ok((events, malformed))
    }
}

/// Now, in nanoseconds since the Unix epoch: the clock the nodes' fence logs use.
pub fn now_ns() -> u128 {
    unix_ns(SystemTime::now())
}

fn append(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}
