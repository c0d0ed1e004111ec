//! Files kept as copies in two published crates are equal, byte for byte.

use checks::workspace_root;

/// (the original, its copy, what it holds)
const COPIES: &[(&str, &str, &str)] = &[
    (
        "resilience-runtime/src/name.rs",
        "resilience-macros/src/name.rs",
        "the point-name rule (the macros check literal names at compile time)",
    ),
    (
        "resilience-runtime/src/heartbeat/fields.rs",
        "resilience-admin/src/fields.rs",
        "the heartbeat's field names (written by the client, read by the console)",
    ),
    (
        "resilience-runtime/src/lock.rs",
        "resilience-admin/src/lock.rs",
        "the rule for poisoned locks",
    ),
];

#[test]
fn each_copy_equals_its_original() {
    let root = workspace_root();
    for (original, copy, what) in COPIES {
        let a = std::fs::read_to_string(root.join(original))
            .unwrap_or_else(|e| panic!("cannot read {original}: {e}"));
        let b = std::fs::read_to_string(root.join(copy))
            .unwrap_or_else(|e| panic!("cannot read {copy}: {e}"));
        assert!(
            a == b,
            "{copy} is a copy of {original} ({what}) and has drifted from it: \
             change the original and copy it over (`cp {original} {copy}`)"
        );
    }
}
