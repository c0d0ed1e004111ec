//! Each published crate's `rust-version` is true of what it is built with: every
//! dependency locked for it (normal dependencies, every feature) declares a
//! `rust-version` no newer than the crate's own. Clippy's `incompatible_msrv`, on in
//! the README test command's clippy run, checks the crate's own code against it.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const PUBLISHED: [&str; 3] = [
    "resilience-macros",
    "resilience-runtime",
    "resilience-admin",
];

/// `1.89` and `1.89.0` alike, as `[major, minor, patch]`.
fn version(text: &str) -> [u64; 3] {
    let mut v = [0; 3];
    for (slot, part) in v.iter_mut().zip(text.split('.')) {
        *slot = part.parse().unwrap_or(0);
    }
    v
}

#[test]
fn every_locked_dependency_accepts_the_crate_rust_version() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(checks::workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    for name in PUBLISHED {
        let (root, package) = packages
            .iter()
            .find(|(_, p)| p["name"] == name)
            .expect("a published crate");
        let msrv = package["rust_version"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} declares no rust-version"));
        // The normal dependencies, transitively (dev and build ones are not the user's).
        let mut seen = BTreeSet::new();
        let mut stack = vec![*root];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            for dep in nodes[id]["deps"].as_array().unwrap() {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null());
                if normal {
                    stack.push(dep["pkg"].as_str().unwrap());
                }
            }
        }
        let newer: Vec<String> = seen
            .iter()
            .map(|id| packages[id])
            .filter(|p| !p["name"].as_str().unwrap().starts_with("resilience-"))
            .filter_map(|p| {
                let needs = p["rust_version"].as_str()?;
                (version(needs) > version(msrv))
                    .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
            })
            .collect();
        assert!(
            newer.is_empty(),
            "{name} declares rust-version {msrv}, but its locked dependencies need more: \
             {newer:?}; raise its rust-version or lock older versions (resolver 3 picks \
             versions that accept the workspace's rust-version on `cargo update`)"
        );
    }
}
