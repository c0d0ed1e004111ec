//! Owns the checks that need more than one argument, or the signature.
//!
//! Each check adds to one `Errors`, so a single compile reports every mistake.

use syn::{Expr, FnArg, Pat, ReturnType, Type};

use crate::args::{did_you_mean, Arg, Args, Kind};
use crate::errors::Errors;
use crate::item::{Body, ItemFn};

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
        if !crate::shape::runs_async(item) {
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

    if let Some(key) = &args.key {
        check_key(&key.value, args.fallback_fn().is_some(), sig, errors);
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

/// The identifier a key expression starts from, if it starts from a plain lowercase
/// name: `user_id`, `req` in `req.tenant` and `req.tenant()`, `name` in `&*name`,
/// `ids` in `ids[0]`. `None` for any other form (a literal, a block, a call of a free
/// function, a path with `::`, a `CONST`): those are rustc's to check.
fn leading_ident(expr: &Expr) -> Option<&syn::Ident> {
    match expr {
        Expr::Path(path) if path.qself.is_none() => {
            let ident = path.path.get_ident()?;
            let lowercase = ident
                .to_string()
                .trim_start_matches("r#")
                .starts_with(|c: char| c.is_lowercase() || c == '_');
            lowercase.then_some(ident)
        }
        Expr::Field(field) => leading_ident(&field.base),
        Expr::MethodCall(call) => leading_ident(&call.receiver),
        Expr::Index(index) => leading_ident(&index.expr),
        Expr::Reference(reference) => leading_ident(&reference.expr),
        Expr::Unary(unary) => leading_ident(&unary.expr),
        Expr::Paren(paren) => leading_ident(&paren.expr),
        Expr::Group(group) => leading_ident(&group.expr),
        Expr::Cast(cast) => leading_ident(&cast.expr),
        Expr::Try(try_) => leading_ident(&try_.expr),
        _ => None,
    }
}

/// Every name a pattern binds: `a` and `b` in `(a, Some(b))`.
fn pattern_names(pat: &Pat, out: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            out.push(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                pattern_names(sub, out);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| pattern_names(&f.pat, out)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::Reference(reference) => pattern_names(&reference.pat, out),
        Pat::Paren(paren) => pattern_names(&paren.pat, out),
        Pat::Type(typed) => pattern_names(&typed.pat, out),
        Pat::Or(or) => or.cases.iter().for_each(|p| pattern_names(p, out)),
        _ => {}
    }
}

// `key = usr_id` on `fn get(user_id: u64)`: the key is evaluated in the fn's body
// before the entry, where only the arguments (and `self`) are in scope; a name that is
// none of them is almost always a typo, said here at the key rather than by rustc's
// "cannot find value". A name bound inside a pattern argument (`(a, b): (u8, u8)`)
// is in scope there too, except with a fallback, which takes the argument whole: the
// pattern is then destructured in the body, after the entry.
fn check_key(expr: &Expr, rebinds: bool, sig: &syn::Signature, errors: &mut Errors) {
    let Some(ident) = leading_ident(expr) else {
        return;
    };
    let name = ident.to_string();
    // `self` is rustc's to check (a fn without a receiver says so).
    if name == "self" {
        return;
    }
    let mut plain = Vec::new();
    let mut patterned = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => plain.push("self".to_owned()),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                    plain.push(p.ident.to_string());
                }
                pat => pattern_names(pat, &mut patterned),
            },
        }
    }
    let fn_name = &sig.ident;
    // `key = usr_id`, or `key = usr.tenant()` by its first name.
    let (subject, no_argument) = match expr {
        Expr::Path(_) => (format!("`key = {name}`"), "names no argument"),
        _ => (
            format!("`key = ...` starts from `{name}`, which"),
            "is no argument",
        ),
    };
    if patterned.contains(&name) {
        if !rebinds {
            return;
        }
        let subject = match expr {
            Expr::Path(_) => format!("`key = {name}` names `{name}`, which is"),
            _ => format!("{subject} is"),
        };
        errors.push(syn::Error::new(
            ident.span(),
            format!(
                "{subject} bound by a pattern in the arguments of `{fn_name}`; with \
                 `fallback` or `fallback_with_reason`, which take that argument whole, the \
                 pattern is destructured only in the body, after the call's entry: give the \
                 argument a name (`pair: (u64, u64)`) and write the key from it \
                 (`key = pair.0`)"
            ),
        ));
        return;
    }
    if plain.contains(&name) {
        return;
    }
    let mut known: Vec<&str> = plain.iter().map(String::as_str).collect();
    if !rebinds {
        known.extend(patterned.iter().map(String::as_str));
    }
    let listed = match known.as_slice() {
        [] => "it has none".to_owned(),
        [one] => format!("its argument is `{one}`"),
        many => format!(
            "its arguments are {}",
            many.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let hint = match did_you_mean(&name, &known) {
        Some(close) => format!("; did you mean `{close}`?"),
        None => String::new(),
    };
    errors.push(syn::Error::new(
        ident.span(),
        format!("{subject} {no_argument} of `{fn_name}`; {listed}{hint}"),
    ));
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

    fn check_key(key: TokenStream, item: TokenStream) -> Vec<String> {
        check(quote!(key = #key, default), item)
    }

    #[test]
    fn a_key_over_the_arguments_passes() {
        let item = quote!(
            fn get(&self, user_id: u64, req: &Req, mut n: u8, (a, b): (u8, u8)) -> u8 {
                1
            }
        );
        for key in [
            quote!(user_id),
            quote!(req.tenant),
            quote!(req.tenant()),
            quote!(&*req.name),
            quote!(*user_id),
            quote!((n)),
            quote!(req.ids[0]),
            quote!(user_id as u32),
            quote!(self.shard),
            quote!(a),
            // Not checked: rustc's to say.
            quote!("everyone"),
            quote!(tenant_of(req)),
            quote!({ 1 }),
            quote!(TENANT),
            quote!(crate::TENANT),
            quote!(Self::KEY),
        ] {
            assert!(check_key(key.clone(), item.clone()).is_empty(), "{key}");
        }
        // `self` in a fn without a receiver is rustc's error.
        assert!(check_key(
            quote!(self.id),
            quote!(
                fn f() {}
            )
        )
        .is_empty());
    }

    #[test]
    fn a_key_naming_no_argument() {
        assert_eq!(
            check_key(quote!(usr_id), quote!(fn get(user_id: u64) -> u8 { 1 })),
            ["`key = usr_id` names no argument of `get`; its argument is `user_id`; did you mean `user_id`?"]
        );
        assert_eq!(
            check_key(
                quote!(requst.tenant()),
                quote!(fn get(&self, request: &Req, n: u8) -> u8 { 1 })
            ),
            ["`key = ...` starts from `requst`, which is no argument of `get`; its arguments are `self`, `request`, `n`; did you mean `request`?"]
        );
        assert_eq!(
            check_key(
                quote!(tenant),
                quote!(
                    fn get(user: u64) -> u8 {
                        1
                    }
                )
            ),
            ["`key = tenant` names no argument of `get`; its argument is `user`"]
        );
        assert_eq!(
            check_key(
                quote!(user),
                quote!(
                    fn get() -> u8 {
                        1
                    }
                )
            ),
            ["`key = user` names no argument of `get`; it has none"]
        );
    }

    #[test]
    fn a_key_from_a_pattern_needs_no_fallback() {
        let item = quote!(
            fn pair((a, b): (u64, u64)) -> u64 {
                a + b
            }
        );
        assert!(check_key(quote!(a), item.clone()).is_empty());
        let errors = check(quote!(key = a, fallback = fb), item.clone());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "`key = a` names `a`, which is bound by a pattern in the arguments of `pair`"
            ),
            "{errors:?}"
        );
        assert!(errors[0].ends_with("(`key = pair.0`)"), "{errors:?}");
        let errors = check(quote!(key = b.0, fallback_with_reason = fb), item);
        assert!(
            errors[0].starts_with(
                "`key = ...` starts from `b`, which is bound by a pattern in the arguments of `pair`"
            ),
            "{errors:?}"
        );
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
