//! Owns `#[downgrade]`: the shared wrapping, entered through `Point::enter`'s
//! in-place form.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use crate::args::Kind;

/// Runs the pipeline for `#[downgrade(ARGS)] ITEM`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    super::run(Kind::Downgrade, args, item, enter)
}

// Input:  __resilience_point: &'static RT::Point, __resilience_permit: Option<RT::Permit>
// Output: RT::enter(__resilience_point, &mut __resilience_permit)
pub(super) fn enter(private: &TokenStream, point: &Ident, slot: &TokenStream) -> TokenStream {
    quote!(#private::enter(#point, &mut #slot))
}
