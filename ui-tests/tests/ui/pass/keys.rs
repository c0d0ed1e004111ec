//! `key = expr` on every shape the attributes take, with every key form.
#![deny(warnings)]

use resilience_runtime::{breaker, downgrade, retry, Downgraded};
use std::fmt::Display;

#[derive(Debug)]
struct E;

impl From<Downgraded> for E {
    fn from(_: Downgraded) -> Self {
        E
    }
}

struct Req {
    tenant: String,
    ids: Vec<u64>,
}

impl Req {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

fn tenant_of(req: &Req) -> &str {
    &req.tenant
}

#[downgrade(point = "ui.keys.deref", default, key = *user)]
fn by_deref(user: &u64) -> u64 {
    *user
}

#[downgrade(point = "ui.keys.index", default, key = req.ids[0])]
fn by_index(req: &Req) -> u64 {
    req.ids[0]
}

// Forms that are not checked against the arguments: rustc's to check.
#[downgrade(point = "ui.keys.call", default, key = tenant_of(&req))]
fn by_free_fn(req: Req) -> String {
    req.tenant
}

#[downgrade(point = "ui.keys.block", default, key = { let t = req.tenant(); t })]
fn by_block(req: &Req) -> usize {
    req.tenant.len()
}

#[downgrade(point = "ui.keys.literal", default, key = "everyone")]
fn by_literal() -> u8 {
    1
}

const TENANT: &str = "const";

#[downgrade(point = "ui.keys.const", default, key = TENANT)]
fn by_const() -> u8 {
    1
}

// A temporary the key makes lives through the entry.
#[downgrade(point = "ui.keys.temporary", default, key = format!("{}-{}", req.tenant, n))]
fn by_temporary(req: Req, n: u8) -> String {
    let _ = n;
    req.tenant
}

#[downgrade(point = "ui.keys.impl_trait", default = 0, key = user)]
fn impl_trait(user: u64) -> impl Display {
    user
}

#[downgrade(point = "ui.keys.never", default = std::process::exit(1), key = code)]
fn never(code: i32) -> ! {
    std::process::exit(code)
}

fn is_bad(_: &E) -> bool {
    true
}

#[breaker(point = "ui.keys.result", is_exception = is_bad, key = id)]
unsafe fn result(id: u32) -> Result<u32, E> {
    Ok(id)
}

#[downgrade(point = "ui.keys.where", default, key = t)]
fn generic_where<T>(t: T) -> Option<T>
where
    T: std::hash::Hash + Display,
{
    Some(t)
}

// `mut` arguments and keys that a `retry` below runs inside.
#[downgrade(point = "ui.keys.retry_below", key = id)]
#[retry(attempts = 2, base = "1ms")]
fn retry_below(mut id: u64) -> Result<u64, E> {
    id += 1;
    Ok(id)
}

#[retry(attempts = 2, base = "1ms")]
#[breaker(point = "ui.keys.retry_above", key = tenant)]
async fn retry_above(tenant: String, n: u8) -> Result<u8, E> {
    let _ = tenant;
    Ok(n)
}

#[downgrade(point = "ui.keys.timeout", timeout = "1s", default, key = tenant)]
async fn timed(tenant: String) -> String {
    tenant
}

fn stale(req: Req, why: Downgraded) -> String {
    let _ = why;
    req.tenant
}

#[downgrade(point = "ui.keys.stale", fallback_with_reason = stale, key = req.tenant())]
fn with_fallback(req: Req) -> String {
    req.tenant
}

trait Repo {
    fn name(&self) -> &str;

    #[downgrade(point = "ui.keys.trait_default", default, key = self.name())]
    fn load(&self, n: u8) -> u8 {
        n
    }
}

struct Db(String);

impl Repo for Db {
    fn name(&self) -> &str {
        &self.0
    }
}

impl Db {
    #[breaker(point = "ui.keys.owned_self", default, key = self.0)]
    fn into_name(self) -> String {
        self.0
    }

    #[downgrade(point = "ui.keys.async_mut", default, key = self.0)]
    async fn rename(&mut self, to: String) -> usize {
        self.0 = to;
        self.0.len()
    }
}

fn is_send<T: Send>(t: T) -> T {
    t
}

fn main() {
    let req = || Req {
        tenant: "t".into(),
        ids: vec![7],
    };
    assert_eq!(by_deref(&3), 3);
    assert_eq!(by_index(&req()), 7);
    assert_eq!(by_free_fn(req()), "t");
    assert_eq!(by_block(&req()), 1);
    assert_eq!(by_literal(), 1);
    assert_eq!(by_const(), 1);
    assert_eq!(by_temporary(req(), 1), "t");
    assert_eq!(impl_trait(4).to_string(), "4");
    let _ = never as fn(i32) -> !;
    assert_eq!(unsafe { result(2) }.unwrap(), 2);
    assert_eq!(generic_where("x"), Some("x"));
    assert_eq!(retry_below(1).unwrap(), 2);
    assert_eq!(with_fallback(req()), "t");
    assert_eq!(Db("db".into()).load(3), 3);
    assert_eq!(Db("db".into()).into_name(), "db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(is_send(retry_above("t".into(), 5)).await.unwrap(), 5);
        assert_eq!(is_send(timed("t".into())).await, "t");
        let mut db = Db("db".into());
        assert_eq!(is_send(db.rename("new".into())).await, 3);
    });
}
