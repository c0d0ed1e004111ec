//! Owns `#[downgrade]`: the shared wrapping, entered through `Point::enter`.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use crate::args::Kind;

/// Runs the pipeline for `#[downgrade(ARGS)] ITEM`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    super::run(Kind::Downgrade, args, item, enter)
}

// Input:  __resilience_point: &'static RT::Point
// Output: RT::Point::enter(__resilience_point)
pub(super) fn enter(private: &TokenStream, point: &Ident) -> TokenStream {
    quote!(#private::Point::enter(#point))
}
