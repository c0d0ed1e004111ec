use resilience_runtime::retry;

#[retry(hedge = "30ms")]
async fn fill(out: &mut Vec<u8>) -> Result<u32, ()> {
    out.push(1);
    Ok(1)
}

struct Svc(u32);

impl Svc {
    #[retry(hedge = "p95")]
    async fn bump(&mut self) -> Result<u32, ()> {
        self.0 += 1;
        Ok(self.0)
    }
}

fn main() {}
