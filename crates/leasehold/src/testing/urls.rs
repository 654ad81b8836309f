//! Checks for a store crate's URL reader.

use std::fmt::Debug;

use crate::store_url::{UrlError, UrlPart};

/// Asserts that `read` refuses every URL of `cases` with an error about its part whose
/// message holds its text.
///
/// ```
/// use leasehold::store_url::{split_scheme, UrlPart};
/// use leasehold::testing::assert_urls_refused;
///
/// let scheme = |url: &str| split_scheme(url).map(|(scheme, _)| scheme.to_owned());
/// assert_urls_refused(scheme, &[("leases.db", UrlPart::Scheme, "no scheme")]);
/// ```
pub fn assert_urls_refused<T: Debug>(
    read: impl Fn(&str) -> Result<T, UrlError>,
    cases: &[(&str, UrlPart, &str)],
) {
    for &(url, part, needle) in cases {
        match read(url) {
            Ok(read) => panic!("{url} was accepted as {read:?}"),
            Err(error) => {
                assert_eq!(error.part(), part, "{url}: {error}");
                assert!(error.to_string().contains(needle), "{url}: {error}");
            }
        }
    }
}
