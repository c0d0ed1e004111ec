use resilience_runtime::downgrade;

#[downgrade(point = "ui.io")]
fn read() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {
    let _ = read();
}
