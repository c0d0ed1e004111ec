//! CPU usage for the adaptive shedder: the source trait, a settable source, and a
//! cgroup-aware sampler of the process's CPU usage on Linux.
//!
//! Usage is in millicores of the CPU the process may use (0 ..= [`CPU_MAX`]): 1000
//! means the cgroup's whole quota (or every CPU when there is no quota) is busy.
//! [`SystemCpu`] reads a process-wide sampler that a background thread refreshes every
//! 250 ms, smoothed like go-zero's `core/stat`: `cpu = 0.95 prev + 0.05 sample`.

use crate::clock::Instant;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, OnceLock};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant as StdInstant};

/// Full CPU usage, in millicores of the quota.
pub const CPU_MAX: u64 = 1000;

/// Sampling period of the background sampler.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Weight of the previous value in the background sampler's average (go-zero's).
const BETA: f64 = 0.95;

/// Where an [`AdaptiveLimiter`](super::AdaptiveLimiter) reads CPU usage.
///
/// Implement it to feed another signal (a simulated CPU, a host metric); use
/// [`SystemCpu`] for the process's own usage and [`FixedCpu`] to set it by hand.
pub trait CpuSource: Send + Sync + fmt::Debug {
    /// The current usage in millicores of the available CPU, `0 ..= 1000` (larger
    /// values are treated as 1000).
    fn usage(&self) -> u64;
}

/// A CPU source set by hand: for tests, simulations, or to run the shedder on its
/// flight rule alone (`FixedCpu::new(0)` with `cpu_threshold: 0`).
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{CpuSource, FixedCpu};
///
/// let cpu = FixedCpu::new(200);
/// assert_eq!(cpu.usage(), 200);
/// cpu.set(950);
/// assert_eq!(cpu.usage(), 950);
/// ```
#[derive(Debug, Default)]
pub struct FixedCpu {
    millis: AtomicU64,
}

impl FixedCpu {
    /// A source reading `millis` (clamped to [`CPU_MAX`]).
    pub fn new(millis: u64) -> Self {
        FixedCpu {
            millis: AtomicU64::new(millis.min(CPU_MAX)),
        }
    }

    /// Changes the reading (clamped to [`CPU_MAX`]).
    pub fn set(&self, millis: u64) {
        self.millis.store(millis.min(CPU_MAX), Ordering::Relaxed);
    }
}

impl CpuSource for FixedCpu {
    fn usage(&self) -> u64 {
        self.millis.load(Ordering::Relaxed)
    }
}

/// The process's CPU usage, from a process-wide [`CpuSampler`] refreshed every 250 ms
/// by a background thread that the first [`usage`](CpuSource::usage) call starts.
///
/// Reads 0 until the first 250 ms have passed, and always 0 where no source of CPU
/// usage exists (not Linux, `/proc` not mounted) or the thread could not be started:
/// the shedder then never considers the system overloaded.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{CpuSource, SystemCpu};
///
/// assert!(SystemCpu.usage() <= 1000);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemCpu;

impl SystemCpu {
    /// What the process-wide sampler reads, `None` when nothing is available (starts
    /// the sampler).
    pub fn sampling() -> Option<CpuSampling> {
        global().sampling
    }

    /// The CPU the process may use, in cores, `None` when no sampler is available
    /// (starts the sampler).
    pub fn limit_cores() -> Option<f64> {
        global().cores
    }
}

impl CpuSource for SystemCpu {
    #[inline]
    fn usage(&self) -> u64 {
        global().usage.load(Ordering::Relaxed)
    }
}

struct Global {
    usage: Arc<AtomicU64>,
    sampling: Option<CpuSampling>,
    cores: Option<f64>,
}

fn global() -> &'static Global {
    static GLOBAL: OnceLock<Global> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let mut sampler = match CpuSampler::detect() {
            Ok(s) => s,
            Err(_) => {
                return Global {
                    usage: Arc::new(AtomicU64::new(0)),
                    sampling: None,
                    cores: None,
                }
            }
        };
        let usage = Arc::new(AtomicU64::new(0));
        let g = Global {
            usage: Arc::clone(&usage),
            sampling: Some(sampler.sampling()),
            cores: Some(sampler.limit_cores()),
        };
        let origin = StdInstant::now();
        let now = move || crate::clock::nanos(origin.elapsed());
        // The baseline reading; the thread computes usage from the next one on.
        let _ = sampler.sample(Instant::from_nanos(now()));
        // Failing to spawn leaves the usage at 0 (see `SystemCpu`).
        let _ = std::thread::Builder::new()
            .name("resilience-cpu".into())
            .spawn(move || {
                let mut avg = 0.0f64;
                loop {
                    std::thread::sleep(SAMPLE_EVERY);
                    if let Ok(Some(sample)) = sampler.sample(Instant::from_nanos(now())) {
                        avg = avg * BETA + sample as f64 * (1.0 - BETA);
                        usage.store((avg.round() as u64).min(CPU_MAX), Ordering::Relaxed);
                    }
                }
            });
        g
    })
}

/// What a [`CpuSampler`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CpuSampling {
    /// cgroup v2: `usage_usec` of the cgroup's `cpu.stat`, over the `cpu.max` quota.
    CgroupV2,
    /// cgroup v1: `cpuacct.usage`, over `cpu.cfs_quota_us / cpu.cfs_period_us`.
    CgroupV1,
    /// The whole machine: the busy share of the `cpu` line of `/proc/stat`.
    ProcStat,
}

/// The CPU usage of the process's cgroup could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// No cgroup file and no `/proc/stat` could be read.
    Unavailable,
    /// A file could not be read or did not have the expected content.
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::Unavailable => {
                f.write_str("no CPU usage source: neither a cgroup nor /proc/stat is readable")
            }
            CpuError::File { path, message } => write!(f, "{}: {message}", path.display()),
        }
    }
}

impl std::error::Error for CpuError {}

/// Reads the CPU usage of the process's cgroup: cgroup v2 first, then v1, then the
/// whole machine from `/proc/stat`.
///
/// Each [`sample`](CpuSampler::sample) returns the usage since the previous one, in
/// millicores of the CPU the cgroup may use: its CFS quota in cores, or its cpuset (or
/// every CPU) when it has none.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::adaptive::CpuSampler;
///
/// if let Ok(mut sampler) = CpuSampler::detect() {
///     assert!(sampler.limit_cores() > 0.0);
///     assert_eq!(sampler.sample(Instant::from_nanos(1_000_000_000))?, None, "the first reading is a baseline");
///     let usage = sampler.sample(Instant::from_nanos(1_250_000_000))?.unwrap_or(0);
///     assert!(usage <= 1000);
/// }
/// # Ok::<(), resilience_runtime::adaptive::CpuError>(())
/// ```
#[derive(Debug)]
pub struct CpuSampler {
    sampling: CpuSampling,
    usage_file: PathBuf,
    cores: f64,
    /// The previous reading: (usage, time) for cgroups, (busy, total) for /proc/stat.
    prev: Option<(u64, u64)>,
}

impl CpuSampler {
    /// Finds the process's CPU accounting under `/proc` and `/sys/fs/cgroup`.
    ///
    /// # Errors
    ///
    /// [`CpuError::Unavailable`] when no source is readable.
    pub fn detect() -> Result<CpuSampler, CpuError> {
        CpuSampler::detect_in(Path::new("/proc"), Path::new("/sys/fs/cgroup"))
    }

    /// Like [`detect`](CpuSampler::detect), with other roots for `/proc` and the cgroup
    /// mount (a container's view, or a test's files).
    ///
    /// # Errors
    ///
    /// [`CpuError::Unavailable`] when no source is readable.
    pub fn detect_in(proc_root: &Path, cgroup_root: &Path) -> Result<CpuSampler, CpuError> {
        if let Ok(membership) = fs::read_to_string(proc_root.join("self/cgroup")) {
            if let Some(s) = detect_v2(&membership, cgroup_root) {
                return Ok(s);
            }
            if let Some(s) = detect_v1(&membership, cgroup_root) {
                return Ok(s);
            }
        }
        let stat = proc_root.join("stat");
        if read_proc_stat(&stat).is_ok() {
            return Ok(CpuSampler {
                sampling: CpuSampling::ProcStat,
                usage_file: stat,
                cores: available_cpus(),
                prev: None,
            });
        }
        Err(CpuError::Unavailable)
    }

    /// What this sampler reads.
    pub fn sampling(&self) -> CpuSampling {
        self.sampling
    }

    /// The CPU the process may use, in cores (the quota, or the number of CPUs).
    pub fn limit_cores(&self) -> f64 {
        self.cores
    }

    /// The file the usage is read from.
    pub fn usage_file(&self) -> &Path {
        &self.usage_file
    }

    /// Reads the usage counters at `now` (monotonic nanoseconds; only cgroup sampling
    /// uses it) and returns the usage since the previous call in millicores
    /// (`0 ..= 1000`), or `None` on the first call or when no time passed.
    ///
    /// # Errors
    ///
    /// [`CpuError::File`] when the usage file cannot be read or parsed; the previous
    /// reading is kept.
    pub fn sample(&mut self, now: Instant) -> Result<Option<u64>, CpuError> {
        let now = now.as_nanos();
        let (used, base) = match self.sampling {
            CpuSampling::CgroupV2 => (read_usage_usec(&self.usage_file)?.saturating_mul(1000), now),
            CpuSampling::CgroupV1 => (read_number(&self.usage_file)?, now),
            CpuSampling::ProcStat => read_proc_stat(&self.usage_file)?,
        };
        let prev = self.prev.replace((used, base));
        let Some((prev_used, prev_base)) = prev else {
            return Ok(None);
        };
        let d_base = base.saturating_sub(prev_base);
        if d_base == 0 {
            return Ok(None);
        }
        let d_used = used.saturating_sub(prev_used) as f64;
        let share = match self.sampling {
            CpuSampling::ProcStat => d_used / d_base as f64,
            _ => d_used / (d_base as f64 * self.cores),
        };
        Ok(Some(((share * CPU_MAX as f64).round() as u64).min(CPU_MAX)))
    }
}

fn file_error(path: &Path, message: impl Into<String>) -> CpuError {
    CpuError::File {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn read(path: &Path) -> Result<String, CpuError> {
    fs::read_to_string(path).map_err(|e| file_error(path, e.to_string()))
}

fn read_number(path: &Path) -> Result<u64, CpuError> {
    let text = read(path)?;
    text.trim()
        .parse()
        .map_err(|_| file_error(path, format!("expected a number, got {:?}", text.trim())))
}

/// `usage_usec` of a cgroup v2 `cpu.stat`.
fn read_usage_usec(path: &Path) -> Result<u64, CpuError> {
    let text = read(path)?;
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| file_error(path, "no `usage_usec` line"))
}

/// (busy, total) jiffies of the `cpu` line of `/proc/stat`.
fn read_proc_stat(path: &Path) -> Result<(u64, u64), CpuError> {
    let text = read(path)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| file_error(path, "no `cpu` line"))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| file_error(path, format!("unexpected `cpu` line {line:?}")))?;
    if fields.len() < 4 {
        return Err(file_error(path, format!("too few fields in {line:?}")));
    }
    // user nice system idle iowait irq softirq steal; guest time is already in user.
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

fn detect_v2(membership: &str, root: &Path) -> Option<CpuSampler> {
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = path.trim().trim_start_matches('/');
    // In a cgroup namespace the mount's root is the process's own cgroup.
    for dir in [root.join(rel), root.to_path_buf()] {
        let stat = dir.join("cpu.stat");
        if read_usage_usec(&stat).is_ok() {
            return Some(CpuSampler {
                sampling: CpuSampling::CgroupV2,
                usage_file: stat,
                cores: v2_quota(&dir)
                    .or_else(|| cpuset_count(&dir.join("cpuset.cpus.effective")))
                    .unwrap_or_else(available_cpus),
                prev: None,
            });
        }
    }
    None
}

/// `cpu.max`: `"$MAX $PERIOD"`, or `"max $PERIOD"` without a quota.
fn v2_quota(dir: &Path) -> Option<f64> {
    let text = fs::read_to_string(dir.join("cpu.max")).ok()?;
    let mut parts = text.split_whitespace();
    let quota: f64 = parts.next()?.parse().ok()?;
    let period: f64 = parts.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

fn detect_v1(membership: &str, root: &Path) -> Option<CpuSampler> {
    let mut acct = None;
    let mut cpu = None;
    let mut cpuset = None;
    for line in membership.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let has = |name: &str| controllers.split(',').any(|c| c == name);
        let entry = (controllers, path.trim().trim_start_matches('/'));
        if has("cpuacct") {
            acct = Some(entry);
        }
        if has("cpu") {
            cpu = Some(entry);
        }
        if has("cpuset") {
            cpuset = Some(entry);
        }
    }
    let usage_file = v1_dirs(root, acct?, "cpuacct")
        .into_iter()
        .map(|d| d.join("cpuacct.usage"))
        .find(|f| read_number(f).is_ok())?;
    let quota = cpu.and_then(|c| {
        v1_dirs(root, c, "cpu").into_iter().find_map(|d| {
            let quota = fs::read_to_string(d.join("cpu.cfs_quota_us")).ok()?;
            let period = fs::read_to_string(d.join("cpu.cfs_period_us")).ok()?;
            let quota: i64 = quota.trim().parse().ok()?;
            let period: i64 = period.trim().parse().ok()?;
            Some((quota > 0 && period > 0).then(|| quota as f64 / period as f64))
        })?
    });
    let cores = quota
        .or_else(|| {
            cpuset.and_then(|c| {
                v1_dirs(root, c, "cpuset")
                    .into_iter()
                    .find_map(|d| cpuset_count(&d.join("cpuset.cpus")))
            })
        })
        .unwrap_or_else(available_cpus);
    Some(CpuSampler {
        sampling: CpuSampling::CgroupV1,
        usage_file,
        cores,
        prev: None,
    })
}

/// Candidate directories of a v1 controller: its mount (named after the controller
/// list, or the single controller), with the process's path, then the mount root (in a
/// cgroup namespace the root is the process's own cgroup).
fn v1_dirs(root: &Path, (controllers, rel): (&str, &str), single: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for mount in [controllers, single] {
        for dir in [root.join(mount).join(rel), root.join(mount)] {
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// The number of CPUs of a cpuset list such as `0-3,6`.
fn cpuset_count(path: &Path) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    let mut n = 0u64;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n as f64)
}

fn available_cpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_lists() {
        let dir = std::env::temp_dir().join(format!("resilience-cpuset-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("cpus");
        for (text, want) in [
            ("0-3,6\n", Some(5.0)),
            ("0\n", Some(1.0)),
            ("", None),
            ("3-1", None),
            ("x", None),
        ] {
            fs::write(&f, text).unwrap();
            assert_eq!(cpuset_count(&f), want, "{text:?}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
