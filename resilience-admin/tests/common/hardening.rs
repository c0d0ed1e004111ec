//! Hardening scenarios run on every backend: text with NUL or control characters
//! is refused with a 400 naming its field, and nothing of it is stored.

use super::*;
use serde_json::{json, Value};

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

/// Asserts a 400 whose message or problems name `field`, or for a point name in a
/// policy the runtime's 422 `invalid_point_name` naming the point; either way with
/// the control characters escaped (`\u{0}`), never raw, in the answer.
fn refused(r: &Response, field: &str, what: &str) {
    let body = r.json();
    let text = body.to_string();
    if field == "points" && r.status == 422 {
        assert_eq!(
            body["error"]["problems"][0]["kind"], "invalid_point_name",
            "{what}: {text}"
        );
        assert!(
            body["error"]["problems"][0]["point"]
                .as_str()
                .unwrap()
                .contains("\\u{"),
            "{what}: {text}"
        );
    } else {
        assert_eq!(r.status, 400, "{what}: {} {text}", r.status);
        assert!(
            text.contains(field),
            "{what}: the answer does not name {field}: {text}"
        );
    }
    assert!(
        !text.contains("\\u0000") && !text.contains("\\u001b"),
        "{what}: raw control characters in {text}"
    );
}

/// NUL and control characters in policy edits and heartbeats: 400, naming the
/// field; the stored policy and history are unchanged.
pub fn control_characters(storage: StorageConfig) {
    let server = start(config(storage));
    let addr = server.addr();
    let edit = |author: &str, comment: &str, policy: Value| {
        put_json(
            addr,
            POLICY,
            Some(ADMIN),
            &json!({"base_version": 0, "author": author, "comment": comment, "policy": policy}),
        )
    };
    let good = json!({"points": {"a": {"max_concurrency": 3}}});
    for (author, comment, policy, field, what) in [
        (
            "alice",
            "fix\0",
            good.clone(),
            "comment",
            "NUL in a comment",
        ),
        (
            "alice",
            "bell\u{7}",
            good.clone(),
            "comment",
            "BEL in a comment",
        ),
        ("al\0ice", "", good.clone(), "author", "NUL in an author"),
        (
            "al\u{1b}[31mice",
            "",
            good.clone(),
            "author",
            "ESC in an author",
        ),
        (
            "alice",
            "",
            json!({"points": {"a\0b": {"max_concurrency": 3}}}),
            "points",
            "NUL in a point name",
        ),
        (
            "alice",
            "",
            json!({"points": {"a\u{1}": {"max_concurrency": 3}}}),
            "points",
            "SOH in a point name",
        ),
    ] {
        refused(&edit(author, comment, policy), field, what);
    }
    // A draft about one point, named with a NUL.
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "point": "a\0", "policy": {"points": {}}}),
    );
    refused(&r, "point", "NUL in `point`");
    // A text draft naming a point with a control character.
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "format": "json",
                "text": "{\"points\": {\"a\\u0000\": {\"max_concurrency\": 3}}}"}),
    );
    refused(&r, "points", "NUL in a point name of a text");
    // Nothing was stored.
    let current = get(addr, POLICY, None).json();
    assert_eq!(current["version"], 0, "{current}");
    // Comments may have line breaks and tabs.
    let r = edit("alice", "first line\n\tsecond line", good.clone());
    assert_eq!(r.status, 200, "{}", r.text());

    // Heartbeats: every text that is stored.
    let cycle = last_closed_cycle(wall_ms());
    let base = json!({"app_group": "shop", "app": "orders", "instance": "i-1", "host": "web",
                      "cycle_start_ms": cycle,
                      "points": [{"name": "order.create", "visits": 2, "passes": 2}]});
    let mut cases: Vec<(Value, &str, &str)> = Vec::new();
    let mut with = |path: &[&str], v: Value, field: &'static str, what: &'static str| {
        let mut hb = base.clone();
        let mut at = &mut hb;
        for k in &path[..path.len() - 1] {
            at = &mut at[*k];
        }
        at[path[path.len() - 1]] = v;
        cases.push((hb, field, what));
    };
    with(&["instance"], json!("i\0"), "instance", "NUL in instance");
    with(&["host"], json!("web\0"), "host", "NUL in host");
    with(
        &["app_group"],
        json!("sh\0op"),
        "app_group",
        "NUL in app_group",
    );
    with(
        &["points"],
        json!([{"name": "order\0create", "visits": 1, "passes": 1}]),
        "points[0]",
        "NUL in a point name",
    );
    for (hb, field, what) in &cases {
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), hb);
        if r.status == 200 {
            // A heartbeat whose invalid points are left out and reported, the rest
            // stored.
            let body = r.json();
            let rejected = body["rejected"].to_string();
            assert!(rejected.contains(field), "{what}: {body}");
            assert!(!rejected.contains("\\u0000"), "{what}: {body}");
        } else {
            refused(&r, field, what);
        }
    }
    // None of them reached storage.
    let apps = get(addr, "/api/v1/apps", None).json();
    let text = apps.to_string();
    assert!(!text.contains("\\u0000"), "{text}");
    // The client's error texts are only shown: stored with their control
    // characters escaped rather than refused.
    let mut hb = base.clone();
    hb["client"] =
        json!({"last_upload_error": "HTTP 500\0", "last_pull_error": "refused\u{1b}[2J"});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
    assert_eq!(r.status, 200, "{}", r.text());
    let list = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let text = list.to_string();
    assert!(text.contains("HTTP 500\\\\u{0}"), "{text}");
    assert!(text.contains("refused\\\\u{1b}[2J"), "{text}");
    assert!(
        !text.contains("\\u0000") && !text.contains("\\u001b"),
        "{text}"
    );
    server.stop();
}
