//! Owns the model of the wrapped function: attributes, visibility and
//! signature parsed, the body kept as raw tokens.
//!
//! The body is never parsed. If it has a syntax error, we still wrap it and
//! let rustc report the error where it is; and syntax newer than our `syn`
//! passes straight through.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser as _};
use syn::{Attribute, Signature, Token, Visibility};

use crate::args::Kind;

/// A function item: free fn, inherent or trait-impl method, or trait method
/// (with or without a default body).
pub(crate) struct ItemFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    /// `default fn` in a specializing impl.
    pub(crate) defaultness: Option<Token![default]>,
    pub(crate) sig: Signature,
    pub(crate) body: Body,
}

pub(crate) enum Body {
    /// `{ ... }`, unparsed.
    Block(Group),
    /// `;`: a trait method declaration. Rejected by `validate`.
    Missing(Token![;]),
}

/// A body split into its leading inner attributes (`#![...]`) and the rest.
pub(crate) struct SplitBody {
    pub(crate) inner_attrs: TokenStream,
    /// The remaining statements, still in a brace group with the original span.
    pub(crate) block: Group,
}

/// The body `#[async_trait]` gives a method: `Box::pin(async move { .. })`.
pub(crate) struct BoxedFuture {
    /// `Box::pin` (or a longer path to it), as written.
    pub(crate) box_pin: TokenStream,
    /// The `async` keyword, where errors about awaiting belong.
    pub(crate) async_span: Span,
    /// The async block's `{ .. }`.
    pub(crate) block: Group,
}

impl ItemFn {
    /// Parses the item an attribute was placed on.
    ///
    /// Anything that is not a function (struct, impl, const, macro call, ...)
    /// is an error pointing at the item, without its attributes.
    pub(crate) fn parse(tokens: TokenStream, kind: Kind) -> syn::Result<ItemFn> {
        let parser = |input: ParseStream<'_>| {
            let attrs = input.call(Attribute::parse_outer)?;
            if !looks_like_fn(input) {
                let item: TokenStream = input.parse()?;
                return Err(syn::Error::new_spanned(
                    item,
                    format!("`#[{kind}]` can only be applied to functions"),
                ));
            }
            let vis: Visibility = input.parse()?;
            let defaultness = if input.peek(Token![default]) {
                Some(input.parse()?)
            } else {
                None
            };
            let sig: Signature = input.parse()?;
            let body = if input.peek(Token![;]) {
                Body::Missing(input.parse()?)
            } else {
                match brace_group(input.parse::<TokenTree>()?) {
                    Ok(group) => Body::Block(group),
                    Err(other) => {
                        return Err(syn::Error::new(other.span(), "expected a function body"))
                    }
                }
            };
            Ok(ItemFn {
                attrs,
                vis,
                defaultness,
                sig,
                body,
            })
        };
        parser.parse2(tokens)
    }
}

/// The `{ ... }` of a body, also when it comes as a `macro_rules!` fragment
/// (`$body:block`), which wraps it in an invisible group; anything else is
/// given back.
fn brace_group(tree: TokenTree) -> Result<Group, TokenTree> {
    match tree {
        TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => Ok(group),
        TokenTree::Group(group) if group.delimiter() == Delimiter::None => {
            let mut inner = group.stream().into_iter();
            match (inner.next(), inner.next()) {
                (Some(only), None) => brace_group(only).map_err(|_| TokenTree::Group(group)),
                _ => Err(TokenTree::Group(group)),
            }
        }
        other => Err(other),
    }
}

/// Whether the tokens after the outer attributes start a fn:
/// `vis? default? const? async? unsafe? (extern "abi"?)? fn`.
///
/// Deciding on the head alone (instead of trying `syn::Item`, which would
/// parse the body) keeps the body unparsed, and still tells `const X: u8`,
/// `unsafe impl` or `extern "C" { .. }` apart from a function.
fn looks_like_fn(input: ParseStream<'_>) -> bool {
    let fork = input.fork();
    if fork.parse::<Visibility>().is_err() {
        return false;
    }
    if fork.peek(Token![default]) && !fork.peek2(Token![!]) {
        let _ = fork.parse::<Token![default]>();
    }
    let _ = fork.parse::<Option<Token![const]>>();
    let _ = fork.parse::<Option<Token![async]>>();
    let _ = fork.parse::<Option<Token![unsafe]>>();
    if fork.peek(Token![extern]) {
        let _ = fork.parse::<syn::Abi>();
    }
    fork.peek(Token![fn])
}

impl Body {
    /// Splits `{ #![inner] STMTS }` into the inner attributes and `{ STMTS }`.
    ///
    /// The wrapper moves the statements into a closure or an `async` block,
    /// where inner attributes are not accepted; hoisting them to the top of
    /// the generated fn body keeps them applying to all of the user's code
    /// (this is what `tracing-attributes` does too).
    pub(crate) fn split(&self) -> Option<SplitBody> {
        let Body::Block(group) = self else {
            return None;
        };
        let tokens: Vec<TokenTree> = group.stream().into_iter().collect();
        let mut split = 0;
        while let [TokenTree::Punct(pound), TokenTree::Punct(bang), TokenTree::Group(attr), ..] =
            &tokens[split..]
        {
            if pound.as_char() == '#'
                && bang.as_char() == '!'
                && attr.delimiter() == Delimiter::Bracket
            {
                split += 3;
            } else {
                break;
            }
        }
        let inner_attrs = tokens[..split].iter().cloned().collect();
        let mut block = Group::new(Delimiter::Brace, tokens[split..].iter().cloned().collect());
        block.set_span(group.span());
        Some(SplitBody { inner_attrs, block })
    }
}

impl SplitBody {
    /// Recognises a body that is exactly `Box::pin(async move { .. })`, the
    /// shape `#[async_trait]` (which always expands before us, being on the
    /// enclosing impl) gives every method.
    ///
    /// Matched on tokens, not parsed, so only that exact shape qualifies:
    /// anything else is wrapped as an ordinary sync fn.
    pub(crate) fn boxed_future(&self) -> Option<BoxedFuture> {
        let tokens: Vec<TokenTree> = self.block.stream().into_iter().collect();
        let (TokenTree::Group(call), path) = tokens.split_last()? else {
            return None;
        };
        if call.delimiter() != Delimiter::Parenthesis {
            return None;
        }
        let path_is_plain = path.iter().all(|tt| match tt {
            TokenTree::Ident(_) => true,
            TokenTree::Punct(p) => p.as_char() == ':',
            _ => false,
        });
        let spelled: String = path.iter().map(ToString::to_string).collect();
        if !path_is_plain || !(spelled == "Box::pin" || spelled.ends_with("::Box::pin")) {
            return None;
        }
        match call.stream().into_iter().collect::<Vec<_>>().as_slice() {
            [TokenTree::Ident(async_), TokenTree::Ident(move_), TokenTree::Group(block)]
                if async_ == "async"
                    && move_ == "move"
                    && block.delimiter() == Delimiter::Brace =>
            {
                Some(BoxedFuture {
                    box_pin: path.iter().cloned().collect(),
                    async_span: async_.span(),
                    block: block.clone(),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::{quote, ToTokens as _};

    use super::*;

    fn parse(tokens: TokenStream) -> syn::Result<ItemFn> {
        ItemFn::parse(tokens, Kind::Downgrade)
    }

    #[test]
    fn free_fn() {
        let item = parse(quote! {
            /// Docs.
            #[inline]
            pub(crate) async unsafe fn get<T: Clone>(&self, id: T) -> Result<T, E> where T: Send { body() }
        })
        .unwrap();
        assert_eq!(item.attrs.len(), 2);
        assert_eq!(item.vis.to_token_stream().to_string(), "pub (crate)");
        assert!(item.sig.asyncness.is_some());
        assert!(item.sig.unsafety.is_some());
        assert!(item.sig.generics.where_clause.is_some());
        assert!(matches!(item.body, Body::Block(_)));
    }

    #[test]
    fn a_body_from_a_declarative_macro() {
        // `$body:block`: the braces inside an invisible group, maybe nested.
        let invisible =
            |tokens: TokenStream| Group::new(Delimiter::None, tokens).into_token_stream();
        let body = invisible(invisible(quote!({ x + 1 })));
        let item = parse(quote!(fn get(x: u8) -> u8 #body)).unwrap();
        let Body::Block(block) = &item.body else {
            panic!("a body")
        };
        assert_eq!(block.delimiter(), Delimiter::Brace);
        assert_eq!(block.stream().to_string(), "x + 1");

        // An invisible group that holds anything else is no body.
        for not_a_body in [invisible(quote!(x + 1)), invisible(quote!({ x } { y }))] {
            let err = parse(quote!(fn get(x: u8) -> u8 #not_a_body))
                .err()
                .unwrap();
            assert_eq!(err.to_string(), "expected a function body");
        }
    }

    #[test]
    fn trait_method_without_body() {
        let item = parse(quote!(
            fn get(&self) -> u8;
        ))
        .unwrap();
        assert!(matches!(item.body, Body::Missing(_)));
    }

    #[test]
    fn default_fn() {
        let item = parse(quote!(default fn get(&self) -> u8 { 1 })).unwrap();
        assert!(item.defaultness.is_some());
    }

    #[test]
    fn body_is_not_parsed() {
        // Not valid Rust, but the body is rustc's business.
        let item = parse(quote!(fn f() { let = ; })).unwrap();
        assert!(matches!(item.body, Body::Block(_)));
    }

    #[test]
    fn non_fn_items_are_rejected() {
        for tokens in [
            quote!(
                struct S;
            ),
            quote!(
                #[derive(Debug)]
                pub struct S {
                    a: u8,
                }
            ),
            quote!(
                const X: u8 = 1;
            ),
            quote!(
                unsafe impl Send for S {}
            ),
            quote!(
                extern "C" {
                    fn f();
                }
            ),
            quote!(
                mod m {}
            ),
            quote!(
                static S: u8 = 1;
            ),
            quote!(m!();),
        ] {
            let err = parse(tokens.clone())
                .err()
                .unwrap_or_else(|| panic!("{tokens}"));
            assert_eq!(
                err.to_string(),
                "`#[downgrade]` can only be applied to functions"
            );
        }
    }

    #[test]
    fn fn_like_heads_are_accepted() {
        for tokens in [
            quote!(
                const fn f() {}
            ),
            quote!(
                extern "C" fn f() {}
            ),
            quote!(
                pub unsafe extern "C" fn f() {}
            ),
            quote!(
                async fn f() {}
            ),
        ] {
            assert!(parse(tokens.clone()).is_ok(), "{tokens}");
        }
    }

    #[test]
    fn inner_attributes_are_split_off() {
        let item = parse(quote!(
            fn f() {
                #![allow(unused)]
                #![doc = "x"]
                let x = 1;
            }
        ))
        .unwrap();
        let split = item.body.split().unwrap();
        assert_eq!(
            split.inner_attrs.to_string(),
            "# ! [allow (unused)] # ! [doc = \"x\"]"
        );
        assert_eq!(split.block.to_string(), "{ let x = 1 ; }");
    }

    #[test]
    fn async_trait_body_is_recognised() {
        for body in [
            quote!(Box::pin(async move {
                let __ret: u8 = { 1 };
                __ret
            })),
            quote!(::std::boxed::Box::pin(async move { 1 })),
        ] {
            let item =
                parse(quote!(fn f() -> Pin<Box<dyn Future<Output = u8>>> { #body })).unwrap();
            let boxed = item.body.split().unwrap().boxed_future();
            assert!(boxed.is_some(), "{body}");
        }
        for body in [
            quote!(Box::pin(async { 1 })),
            quote!(Box::pin(async move { 1 });),
            quote!(let x = 1; Box::pin(async move { x })),
            quote!(Box::new(async move { 1 })),
            quote!(Rc::pin(async move { 1 })),
        ] {
            let item =
                parse(quote!(fn f() -> Pin<Box<dyn Future<Output = u8>>> { #body })).unwrap();
            let boxed = item.body.split().unwrap().boxed_future();
            assert!(boxed.is_none(), "{body}");
        }
    }

    #[test]
    fn outer_attribute_in_body_is_not_split_off() {
        let item = parse(quote!(
            fn f() {
                #[allow(unused)]
                let x = 1;
            }
        ))
        .unwrap();
        let split = item.body.split().unwrap();
        assert!(split.inner_attrs.is_empty());
    }
}
