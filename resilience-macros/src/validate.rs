//! Owns the checks that need more than one argument, or the signature.
//!
//! Each check adds to one `Errors`, so a single compile reports every mistake.

use syn::{ReturnType, Type};

use crate::args::{Args, Kind};
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

    // `fallback` and `default` both say what to return when downgraded:
    // point at whichever came second, the one to remove.
    if let (Some(fallback), Some(default)) = (&args.fallback, &args.default) {
        let second = if fallback.position > default.position {
            fallback.key_span
        } else {
            default.key_span
        };
        errors.push(syn::Error::new(
            second,
            "`fallback` and `default` cannot be used together",
        ));
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
