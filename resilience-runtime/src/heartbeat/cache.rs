//! The local cache of the console's layer: written atomically after every pull that
//! applied a new version, read when the client is made, so that an instance that
//! restarts while the console is unreachable enforces what it enforced before.
//!
//! The file is JSON: `{"app": "group/app", "version": N, "policy": {policy file}}`.
//! A cache of another app, or one that does not parse, is ignored (and reported).

use crate::config::{Format, PolicyFile};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::Path;

/// Writes the cache: a temporary file beside it, flushed to disk, then renamed over
/// it, so a crash leaves the old cache or the new one, never half of one.
pub(crate) fn write(path: &Path, app: &str, version: u64, file: &PolicyFile) -> Result<(), String> {
    let policy: Value = file
        .to_text(Format::Json)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))?;
    let body = json!({ "app": app, "version": version, "policy": policy }).to_string();
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} is not a file path", path.display()))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(body.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable once the directory is synced (best effort:
        // not every platform can open a directory).
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok::<(), std::io::Error>(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write the policy cache {}: {e}", path.display())
    })
}

/// Reads the cache: `Ok(None)` if there is none, `Err` for a cache that cannot be
/// used (unreadable, not ours, invalid).
pub(crate) fn read(path: &Path, app: &str) -> Result<Option<(u64, PolicyFile)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read the policy cache {}: {e}",
                path.display()
            ))
        }
    };
    let bad = |what: String| format!("policy cache {} ignored: {what}", path.display());
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    match v.get("app").and_then(Value::as_str) {
        Some(a) if a == app => {}
        other => {
            return Err(bad(format!(
                "it is the cache of app {other:?}, not {app:?}"
            )))
        }
    }
    let version = v
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no `version`".into()))?;
    let policy = v.get("policy").ok_or_else(|| bad("no `policy`".into()))?;
    let file =
        PolicyFile::parse(&policy.to_string(), Format::Json).map_err(|e| bad(e.to_string()))?;
    Ok(Some((version, file)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PointConfig;
    use crate::{BreakerPolicy, Policy};

    #[test]
    fn a_written_cache_reads_back_and_other_apps_or_junk_are_refused() {
        let dir = std::env::temp_dir().join(format!("resilience-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("console.json");
        let _ = std::fs::remove_file(&path);
        assert_eq!(read(&path, "g/a"), Ok(None));
        let mut file = PolicyFile::default();
        let policy = Policy::builder().max_visits(7).build().unwrap();
        file.points.insert(
            "p".into(),
            PointConfig::builder()
                .policy(policy)
                .breaker(BreakerPolicy::default())
                .build(),
        );
        write(&path, "g/a", 9, &file).unwrap();
        assert_eq!(read(&path, "g/a"), Ok(Some((9, file.clone()))));
        assert!(read(&path, "g/other")
            .unwrap_err()
            .contains("not \"g/other\""));
        std::fs::write(&path, "{\"app\": \"g/a\", \"version\": 1, \"policy\": {\"points\": {\"p\": {\"max_visits\": -1}}}}").unwrap();
        assert!(read(&path, "g/a").unwrap_err().contains("max_visits"));
        std::fs::write(&path, "half a fi").unwrap();
        assert!(read(&path, "g/a").unwrap_err().contains("not JSON"));
        // No temporary file is left behind.
        write(&path, "g/a", 10, &file).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("console.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
