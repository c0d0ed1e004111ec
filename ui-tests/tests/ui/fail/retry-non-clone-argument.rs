use resilience_runtime::retry;

struct Connection;

#[retry(attempts = 2)]
fn send(conn: Connection, bytes: Vec<u8>) -> Result<usize, ()> {
    let _ = conn;
    Ok(bytes.len())
}

fn main() {}
