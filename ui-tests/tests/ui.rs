//! Compile-time behaviour of `#[downgrade]`: every supported shape compiles and runs,
//! every misuse is a compile error pointing at the offending tokens.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
