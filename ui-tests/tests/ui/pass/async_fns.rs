use resilience_runtime::{downgrade, Downgraded};

#[derive(Debug)]
struct E;
impl From<Downgraded> for E {
    fn from(_: Downgraded) -> Self {
        E
    }
}

#[downgrade(point = "pass.async.result")]
async fn fetch(id: u32) -> Result<u32, E> {
    Ok(id)
}

async fn fb(id: u32, _name: String) -> u32 {
    id
}

#[downgrade(point = "pass.async.fallback", fallback = fb)]
async fn fetch_named(id: u32, name: String) -> u32 {
    id + name.len() as u32
}

#[downgrade(default)]
async fn early_return(x: u32) -> u32 {
    if x == 0 {
        return 0;
    }
    x
}

fn main() {
    futures_executor::block_on(async {
        assert_eq!(fetch(1).await.unwrap(), 1);
        assert_eq!(fetch_named(1, "ab".into()).await, 3);
        assert_eq!(early_return(0).await, 0);
    });
}
