use resilience_runtime::downgrade;

async fn send(_body: String) -> u32 {
    1
}

async fn queued(_body: String) -> u32 {
    0
}

// After a cut the fallback gets the arguments, so the body may only borrow them.
#[downgrade(timeout = "1s", fallback = queued)]
async fn post(body: String) -> u32 {
    send(body).await
}

fn main() {}
