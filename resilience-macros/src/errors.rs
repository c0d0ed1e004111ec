//! The errors of one expansion, collected so that a single compile reports every
//! mistake (the argument parser's and the checks' alike).

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
