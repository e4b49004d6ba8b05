//! What the benchmarks read of the machine and of processes: cores, memory, a process's
//! resident memory and CPU time (from `/proc`), and the date.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::Error;

/// The machine a run was made on.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// `MemTotal` from `/proc/meminfo`, in MiB.
    pub memory_mib: f64,
    /// The CPU's model name from `/proc/cpuinfo`, if it says.
    pub cpu: Option<String>,
}

impl Machine {
    /// The machine this process runs on.
    pub fn this() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| kib_field(&text, "MemTotal:"))
            .map_or(0.0, |kib| kib / 1024.0);
        let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        });
        Machine {
            cores,
            memory_mib,
            cpu,
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"cores": self.cores, "memory_total_mib": self.memory_mib, "cpu": self.cpu})
    }
}

/// A `Name:   1234 kB` field of a `/proc` file, in KiB.
fn kib_field(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
}

/// A memory figure of process `pid` from `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), in MiB.
fn status_mib(pid: u32, field: &str) -> Result<f64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    kib_field(&status, field)
        .map(|kib| kib / 1024.0)
        .ok_or_else(|| Error::Check(format!("no {field} in /proc/{pid}/status")))
}

/// The resident memory of process `pid` now, in MiB.
pub fn rss_mib(pid: u32) -> Result<f64, Error> {
    status_mib(pid, "VmRSS:")
}

/// The peak resident memory of process `pid` so far (`VmHWM`), in MiB.
pub fn peak_rss_mib(pid: u32) -> Result<f64, Error> {
    status_mib(pid, "VmHWM:")
}

/// The CPU time (user + system) process `pid` has used, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat).ok_or_else(|| Error::Check(format!("cannot read /proc/{pid}/stat")))
}

/// The CPU time every thread of process `pid` has had so far, in nanoseconds: the sum of
/// the first field of each `/proc/<pid>/task/<tid>/schedstat` (finer than the 10 ms ticks
/// of [`cpu_ticks`], for phases of a second or less; threads that have exited are no
/// longer counted, so it is meant for processes with long-lived threads).
pub fn cpu_ns(pid: u32) -> Result<u64, Error> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread may end between the listing and the read.
        let Ok(line) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += parse_schedstat(&line)
            .ok_or_else(|| Error::Check(format!("cannot read {}", path.display())))?;
    }
    Ok(total)
}

/// The time on CPU (the first field, in nanoseconds) of a `schedstat` line.
fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// utime + stime of a `/proc/<pid>/stat` line (fields 14 and 15; the command name, in
/// parentheses, may hold spaces).
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Waits until processes `pids` together use less than a fifth of a core over half a
/// second (the work a previous step started is done), for at most `limit`. Returns how
/// long it waited.
pub async fn settle(pids: &[u32], limit: Duration) -> Duration {
    // Linux counts CPU time in ticks of 1/100 s (USER_HZ) on every platform it runs on.
    const TICKS_PER_SECOND: f64 = 100.0;
    const WINDOW: Duration = Duration::from_millis(500);
    let started = Instant::now();
    let total = || pids.iter().filter_map(|p| cpu_ticks(*p).ok()).sum::<u64>();
    let mut before = total();
    while started.elapsed() < limit {
        tokio::time::sleep(WINDOW).await;
        let now = total();
        let busy = now.saturating_sub(before) as f64 / TICKS_PER_SECOND / WINDOW.as_secs_f64();
        if busy < 0.2 {
            break;
        }
        before = now;
    }
    started.elapsed()
}

/// The time now in UTC, as RFC 3339 (`2025-06-01T12:34:56Z`).
pub fn now_utc() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(seconds)
}

/// Seconds since the Unix epoch as an RFC 3339 UTC date and time.
fn rfc3339(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_709_164_800 + 3_723), "2024-02-29T01:02:03Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
        assert!(now_utc().ends_with('Z'));
    }

    #[test]
    fn cpu_ticks_skip_a_command_name_with_spaces() {
        let stat = "42 (tokio runtime) S 1 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(281));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn schedstat_gives_the_time_on_cpu() {
        assert_eq!(parse_schedstat("1234567 890 12\n"), Some(1_234_567));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn this_process_cpu_time_grows_with_work() {
        let pid = std::process::id();
        let before = cpu_ns(pid).unwrap();
        // Spin for 20 ms of wall time: some of it is on CPU.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(cpu_ns(pid).unwrap() > before);
    }

    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let pid = std::process::id();
        assert!(rss_mib(pid).unwrap() > 0.0);
        assert!(peak_rss_mib(pid).unwrap() >= rss_mib(pid).unwrap() * 0.5);
        assert!(cpu_ticks(pid).is_ok());
        let machine = Machine::this();
        assert!(machine.cores >= 1 && machine.memory_mib > 0.0);
    }
}
