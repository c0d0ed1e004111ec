//! Apps whose group or name holds a `/` in real Chromium: `a/b` + `c` and `a` + `b/c`
//! are two apps, listed apart (with labels a person can tell apart), and picking one
//! shows its own points and its own stored policy, never the other's.

use super::*;

/// The option of `#app` for the app (group, name): its index, label and value.
fn option_of(browser: &Browser, group: &str, name: &str) -> (u64, String) {
    let key = serde_json::to_string(&json!([group, name])).unwrap();
    let found = browser.wait(
        &format!(
            "(() => {{ const o = [...document.querySelectorAll('#app option')]; \
             const i = o.findIndex((x) => x.value === {key:?}); \
             return i < 0 ? null : [i, o[i].textContent]; }})()"
        ),
        "the app's option",
    );
    (
        found[0].as_u64().unwrap(),
        found[1].as_str().unwrap().to_owned(),
    )
}

#[test]
fn apps_with_a_slash_are_told_apart_in_the_dashboard() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let cycle = last_closed_cycle(wall_ms());
    let apps = [("a/b", "c", "p.left"), ("a", "b/c", "p.right")];
    for (group, app, point) in apps {
        let hb = json!({"app_group": group, "app": app, "instance": "i-1", "cycle_start_ms": cycle,
                        "points": [{"name": point, "visits": 1, "passes": 1}]});
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let policies = [
        json!({"points": {"p.left": {"max_concurrency": 3}}}),
        json!({"points": {"p.right": {"max_visits": 7}}}),
    ];
    for ((group, app, _), policy) in apps.iter().zip(&policies) {
        let path = format!(
            "/api/v1/apps/{}/{}/policy",
            group.replace('/', "%2F"),
            app.replace('/', "%2F")
        );
        let r = put_json(
            addr,
            &path,
            Some(ADMIN),
            &json!({"base_version": 0, "author": "alice", "policy": policy}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    let (left_index, left_label) = option_of(&browser, "a/b", "c");
    let (right_index, right_label) = option_of(&browser, "a", "b/c");
    assert_ne!(left_index, right_index);
    assert_ne!(left_label, right_label, "two apps, one label");
    assert!(left_label.starts_with("\"a/b\" / \"c\""), "{left_label}");
    assert!(right_label.starts_with("\"a\" / \"b/c\""), "{right_label}");

    for (index, point, other, text) in [
        (right_index, "p.right", "p.left", "max_visits = 7"),
        (left_index, "p.left", "p.right", "max_concurrency = 3"),
    ] {
        browser.click(&format!("#app option:nth-child({})", index + 1));
        browser.wait(
            &format!(
                "document.querySelector('#points tbody tr[data-point=\"{point}\"]') && \
                 !document.querySelector('#points tbody tr[data-point=\"{other}\"]')"
            ),
            "the app's own points",
        );
        browser.wait(
            &format!("document.querySelector('#raw-app-text').value.includes('{text}')"),
            "the app's own stored policy",
        );
        let shown = browser.js("return document.querySelector('#raw-app-text').value;");
        assert!(
            !shown.as_str().unwrap().contains(other),
            "the other app's policy shown: {shown}"
        );
    }
    drop(browser);

    // Reading changed nothing: each app keeps its own version 1.
    for ((group, app, _), policy) in apps.iter().zip(&policies) {
        let path = format!(
            "/api/v1/apps/{}/{}/policy",
            group.replace('/', "%2F"),
            app.replace('/', "%2F")
        );
        let stored = get(addr, &path, None).json();
        assert_eq!(stored["version"], 1, "{stored}");
        assert_eq!(&stored["policy"], policy, "{stored}");
    }
    server.stop();
}
