//! Compiles this crate with `cfg(loom)`, so the engine files it includes by path
//! drop their std-thread tests and see loom's atomics through `crate::sync`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo::rustc-cfg=loom");
}
