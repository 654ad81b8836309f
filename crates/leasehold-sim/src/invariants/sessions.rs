//! **Own session.** With session leases, a process ends its own session (dropping every
//! lease it holds) only after someone else changed its member record: an operator, another
//! node forgetting it for dead, a destroy, a second process under its name. When a process
//! ends its session while the store still holds, at the same version, the last write of
//! that record the process itself made, the end came from inside: two of its own writes
//! racing, a reply read out of order, a stamp it forgot. That costs no safety (the leases
//! are dropped, not kept) but it abandons the work in flight of every partition it held.
//!
//! Checked at every store call and callback of a process, before it acts on anything else:
//! the store then still shows what the process found when it ended its session.

use leasehold::Version;

use super::Holder;

/// Checks one session end of `holder`: `stored` is the version of its member record as the
/// store holds it now (`None`: no record), `own` the version its own last conditioned write
/// (an update or a delete, made on the version it knew) left (`None` inside: its delete;
/// `None` outside: no such write, or a create since, which may have landed on a record
/// someone else deleted).
///
/// Fails if the two are the same: the process's own conditioned write is the last change,
/// so nobody but the process changed the record since the version it knew.
pub fn ended(
    holder: Holder,
    stored: Option<&Version>,
    own: Option<&Option<Version>>,
) -> Result<(), String> {
    match own {
        Some(own) if own.as_ref() == stored => Err(format!(
            "{holder} ended its own session while the store held its own last write of it ({})",
            match stored {
                Some(version) => format!("version {version:?}"),
                None => "deleted".to_owned(),
            }
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLDER: Holder = Holder {
        node: 2,
        incarnation: 1,
    };

    fn version(n: u64) -> Version {
        Version::from_number(n)
    }

    #[test]
    fn an_end_over_the_processs_own_last_write_is_caught() {
        assert!(ended(HOLDER, Some(&version(7)), Some(&Some(version(7)))).is_err());
        // Its own delete, then an end for a record "gone".
        assert!(ended(HOLDER, None, Some(&None)).is_err());
    }

    #[test]
    fn an_end_after_anyone_else_wrote_is_not() {
        // Rewritten (a twin, an operator), deleted (a destroy, the others), or last written
        // by a create.
        assert!(ended(HOLDER, Some(&version(8)), Some(&Some(version(7)))).is_ok());
        assert!(ended(HOLDER, None, Some(&Some(version(7)))).is_ok());
        assert!(ended(HOLDER, Some(&version(7)), None).is_ok());
    }
}
