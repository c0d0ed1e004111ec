//! Owns the checks that need more than one argument, or the signature.
//!
//! Each check adds to one `Errors`, so a single compile reports every mistake.

use syn::{ReturnType, Type};

use crate::args::{Arg, Args, Kind};
use crate::item::{Body, ItemFn};

/// Collects errors and folds them with `syn::Error::combine`.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(err),
            None => self.0 = Some(err),
        }
    }

    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.0
    }
}

/// Checks the model; the expansion only ever sees a model that passed.
pub(crate) fn validate(kind: Kind, args: &Args, item: &ItemFn, errors: &mut Errors) {
    let sig = &item.sig;

    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            format!("`#[{kind}]` cannot be applied to a `const fn`; remove `const`"),
        ));
    }
    if let Some(abi) = &sig.abi {
        // `extern "Rust"` is the default ABI spelled out; anything else cannot
        // unwind through our `catch_unwind` the way a Rust fn does.
        let is_rust = abi.name.as_ref().is_some_and(|name| name.value() == "Rust");
        if !is_rust {
            errors.push(syn::Error::new_spanned(
                abi,
                format!("`#[{kind}]` cannot be applied to an `extern` fn"),
            ));
        }
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            format!("`#[{kind}]` cannot be applied to a variadic fn"),
        ));
    }
    if let Body::Missing(_) = &item.body {
        errors.push(syn::Error::new(
            sig.ident.span(),
            format!(
                "`#[{kind}]` needs a function body; put it on the method in the `impl`, or give the trait method a default body"
            ),
        ));
    }

    // `fallback`, `fallback_with_reason` and `default` each say what to return
    // when downgraded: point at whichever of a pair came second, the one to remove.
    if let (Some(fallback), Some(default)) = (&args.fallback, &args.default) {
        errors.push(syn::Error::new(
            second(fallback, default),
            "`fallback` and `default` cannot be used together",
        ));
    }
    if let (Some(fallback), Some(with_reason)) = (&args.fallback, &args.fallback_with_reason) {
        errors.push(syn::Error::new(
            second(fallback, with_reason),
            "`fallback` and `fallback_with_reason` cannot be used together; keep \
             `fallback_with_reason` if the fallback needs to know why (its last argument \
             is the `Downgraded`)",
        ));
    }
    if let (Some(with_reason), Some(default)) = (&args.fallback_with_reason, &args.default) {
        errors.push(syn::Error::new(
            second(with_reason, default),
            "`fallback_with_reason` and `default` cannot be used together",
        ));
    }

    // A sync body cannot be stopped once it runs: nothing could cut it at a deadline.
    if let Some(timeout) = &args.timeout {
        if !crate::expand::runs_async(item) {
            errors.push(syn::Error::new(
                timeout.key_span,
                format!(
                    "`timeout` needs an `async fn`: the body of a sync fn cannot be cancelled \
                     once it runs, so nothing could cut it at its deadline; make `{}` async, \
                     or remove `timeout` and count slow calls with the policy's \
                     `timeouts(threshold, n)` rule",
                    sig.ident
                ),
            ));
        }
    }

    // Whether the return type is `Result`-like is rustc's to say (aliases
    // such as `io::Result<T>` count); only the cases that cannot possibly be
    // a `Result` are caught here, with a clearer message.
    if let Some(is_exception) = &args.is_exception {
        let cannot_be_result = match &sig.output {
            ReturnType::Default => true,
            ReturnType::Type(_, ty) => matches!(&**ty, Type::Never(_) | Type::Tuple(_)),
        };
        if cannot_be_result {
            errors.push(syn::Error::new(
                is_exception.key_span,
                "`is_exception` needs a function that returns a `Result`",
            ));
        }
    }
}

/// The key of whichever of two arguments was written second.
fn second<A, B>(a: &Arg<A>, b: &Arg<B>) -> proc_macro2::Span {
    if a.position > b.position {
        a.key_span
    } else {
        b.key_span
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::TokenStream;
    use quote::quote;

    use super::*;

    fn check(args: TokenStream, item: TokenStream) -> Vec<String> {
        let (args, err) = Args::parse(args);
        assert!(err.is_none());
        let item = ItemFn::parse(item, Kind::Downgrade).unwrap();
        let mut errors = Errors::default();
        validate(Kind::Downgrade, &args, &item, &mut errors);
        errors
            .finish()
            .map(|err| err.into_iter().map(|e| e.to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn plain_fn_passes() {
        assert!(check(
            quote!(),
            quote!(
                fn f() -> Result<(), E> {
                    Ok(())
                }
            )
        )
        .is_empty());
        assert!(check(
            quote!(),
            quote!(
                extern "Rust" fn f() {}
            )
        )
        .is_empty());
    }

    #[test]
    fn const_fn() {
        assert_eq!(
            check(
                quote!(),
                quote!(
                    const fn f() {}
                )
            ),
            ["`#[downgrade]` cannot be applied to a `const fn`; remove `const`"]
        );
    }

    #[test]
    fn extern_fn() {
        assert_eq!(
            check(
                quote!(),
                quote!(
                    extern "C" fn f() {}
                )
            ),
            ["`#[downgrade]` cannot be applied to an `extern` fn"]
        );
        assert_eq!(
            check(
                quote!(),
                quote!(
                    extern "C" fn f() {}
                )
            ),
            ["`#[downgrade]` cannot be applied to an `extern` fn"]
        );
    }

    #[test]
    fn variadic_fn() {
        let errors = check(
            quote!(),
            quote!(
                unsafe extern "C" fn f(a: i32, ...) {}
            ),
        );
        assert_eq!(
            errors,
            [
                "`#[downgrade]` cannot be applied to an `extern` fn",
                "`#[downgrade]` cannot be applied to a variadic fn",
            ]
        );
    }

    #[test]
    fn missing_body() {
        let errors = check(
            quote!(),
            quote!(
                fn f(&self);
            ),
        );
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("`#[downgrade]` needs a function body"));
    }

    #[test]
    fn fallback_with_default() {
        assert_eq!(
            check(
                quote!(fallback = f, default),
                quote!(
                    fn f() -> u8 {
                        1
                    }
                )
            ),
            ["`fallback` and `default` cannot be used together"]
        );
        assert_eq!(
            check(
                quote!(default = 1, fallback = f),
                quote!(
                    fn f() -> u8 {
                        1
                    }
                )
            ),
            ["`fallback` and `default` cannot be used together"]
        );
    }

    #[test]
    fn fallback_with_reason_excludes_fallback_and_default() {
        let item = quote!(
            fn f() -> u8 {
                1
            }
        );
        let errors = check(quote!(fallback_with_reason = g, fallback = f), item.clone());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("`fallback` and `fallback_with_reason` cannot be used together"),
            "{errors:?}"
        );
        assert_eq!(
            check(quote!(default, fallback_with_reason = g), item.clone()),
            ["`fallback_with_reason` and `default` cannot be used together"]
        );
        assert_eq!(
            check(
                quote!(fallback = f, fallback_with_reason = g, default),
                item
            )
            .len(),
            3
        );
    }

    #[test]
    fn timeout_needs_an_async_fn() {
        let errors = check(
            quote!(timeout = "1s"),
            quote!(
                fn slow() -> u8 {
                    1
                }
            ),
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "`timeout` needs an `async fn`: the body of a sync fn cannot be cancelled"
            ),
            "{errors:?}"
        );
        assert!(errors[0].contains("make `slow` async"), "{errors:?}");
        assert!(
            errors[0].contains("`timeouts(threshold, n)` rule"),
            "{errors:?}"
        );
        assert!(check(
            quote!(timeout = "1s"),
            quote!(
                async fn slow() -> u8 {
                    1
                }
            )
        )
        .is_empty());
        // An `#[async_trait]` method's boxed future can be cut too.
        assert!(check(
            quote!(timeout = "1s"),
            quote!(
                fn slow<'a>(&'a self) -> Pin<Box<dyn Future<Output = u8> + Send + 'a>> {
                    Box::pin(async move { 1 })
                }
            )
        )
        .is_empty());
    }

    #[test]
    fn is_exception_without_result() {
        assert_eq!(
            check(
                quote!(is_exception = p),
                quote!(
                    fn f() {}
                )
            ),
            ["`is_exception` needs a function that returns a `Result`"]
        );
        assert!(check(
            quote!(is_exception = p),
            quote!(
                fn f() -> io::Result<()> {
                    Ok(())
                }
            )
        )
        .is_empty());
    }

    #[test]
    fn every_mistake_is_reported() {
        let errors = check(
            quote!(fallback = f, default),
            quote!(
                const extern "C" fn f() -> u8 {
                    1
                }
            ),
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
    }
}
