use resilience_runtime::downgrade;

fn lookup_cached(_id: u32, _name: &str) -> String {
    String::new()
}

#[downgrade(point = "ui.lookup", fallback = lookup_cached)]
fn lookup(id: u64, name: &str) -> String {
    format!("{id} {name}")
}

struct Store;

impl Store {
    fn cached(&self, _id: u32) -> Option<u32> {
        None
    }

    #[downgrade(point = "ui.store", fallback = Self::cached)]
    fn get(&self, id: u64) -> Option<u32> {
        Some(id as u32)
    }
}

async fn fetch_cached(_id: u32) -> String {
    String::new()
}

#[downgrade(point = "ui.fetch", fallback = fetch_cached)]
async fn fetch(id: u64) -> String {
    id.to_string()
}

fn main() {}
