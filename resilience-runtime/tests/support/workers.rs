//! Several OS processes for integration tests: a test starts copies of its own binary
//! as workers (running one `#[ignore]`d worker test, which does nothing unless the
//! worker variable is set), each prints one `WORKER-REPORT key=value ...` line, and
//! the test gets the reports back.
//!
//! Use it from a test file with
//!
//! ```ignore
//! #[path = "support/workers.rs"]
//! mod workers;
//! ```

#![allow(dead_code)] // each test file uses what it needs

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// One worker's report.
pub(crate) type Report = BTreeMap<String, String>;

/// Starts `n` copies of this test binary running the worker test `test`, with
/// `var=mode`, `WORKER_ID=i` and `env` set, and returns each one's report; fails if a
/// worker fails or prints none.
pub(crate) fn run(
    test: &str,
    var: &str,
    mode: &str,
    n: usize,
    env: &[(&str, String)],
) -> Vec<Report> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                test,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(var, mode)
            .env("WORKER_ID", i.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start worker {i}: {e}"))
        })
        .collect();
    children
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let out = child.wait_with_output().expect("worker output");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "worker {i} failed: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let line = stdout
                .lines()
                // The harness prints `test NAME ... ` before the output.
                .find_map(|l| l.split_once("WORKER-REPORT ").map(|(_, r)| r))
                .unwrap_or_else(|| panic!("worker {i} printed no report:\n{stdout}"));
            line.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// The number `key` of a report.
pub(crate) fn num(report: &Report, key: &str) -> u64 {
    report
        .get(key)
        .unwrap_or_else(|| panic!("no `{key}` in {report:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("`{key}` in {report:?}: {e}"))
}

/// The sum of the numbers `key` of all reports.
pub(crate) fn sum(reports: &[Report], key: &str) -> u64 {
    reports.iter().map(|r| num(r, key)).sum()
}

/// A variable a worker needs.
pub(crate) fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}
