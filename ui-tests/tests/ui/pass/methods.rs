use resilience_runtime::downgrade;

struct Svc(u32);

impl Svc {
    fn fb_ref(&self, x: u32) -> u32 {
        x
    }
    fn fb_mut(&mut self, x: u32) -> u32 {
        x
    }
    fn fb_owned(self) -> u32 {
        0
    }
    async fn fb_async(&self) -> u32 {
        0
    }

    #[downgrade(fallback = Self::fb_ref)]
    fn by_ref(&self, x: u32) -> u32 {
        self.0 + x
    }

    #[downgrade(fallback = Self::fb_mut)]
    fn by_mut(&mut self, x: u32) -> u32 {
        self.0 += x;
        self.0
    }

    #[downgrade(fallback = Self::fb_owned)]
    fn owned(self) -> u32 {
        self.0
    }

    #[downgrade(fallback = Self::fb_async)]
    async fn by_ref_async(&self) -> u32 {
        self.0
    }

    #[downgrade(default)]
    fn generic_method<T: Into<u32>>(&self, t: T) -> u32
    where
        T: Copy,
    {
        t.into() + self.0
    }
}

trait Api {
    fn call(&self) -> u32;
    fn provided(&self) -> u32;
}

impl Api for Svc {
    #[downgrade(default)]
    fn call(&self) -> u32 {
        self.0
    }

    #[downgrade(default = 7)]
    fn provided(&self) -> u32 {
        self.0
    }
}

fn main() {
    let mut s = Svc(1);
    assert_eq!(s.by_ref(1), 2);
    assert_eq!(s.by_mut(1), 2);
    assert_eq!(s.generic_method(3u8), 5);
    assert_eq!(s.call(), 2);
    assert_eq!(s.provided(), 2);
    assert_eq!(futures_executor::block_on(s.by_ref_async()), 2);
    assert_eq!(s.owned(), 2);
}
