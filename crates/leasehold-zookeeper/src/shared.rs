//! What a store and the watches it opened share: the session and the znode layout.
//!
//! Both `store` and `watch` depend on this module, and it on neither, so the store can open
//! watches without the watches reaching back into the store.

use crate::connection::Connection;
use crate::paths::Layout;

/// The session and the layout, shared by a store's clones and its watches' tasks.
pub(crate) struct Shared {
    pub(crate) connection: Connection,
    pub(crate) layout: Layout,
}
