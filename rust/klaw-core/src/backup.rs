//! Online backup of klaw.db (`klaw backup`): a consistent copy taken while the engine
//! writes, through SQLite's backup API and the same SQLite the store uses (two SQLite
//! libraries on one file in one process break POSIX locking).
//!
//! The whole database is copied in one `sqlite3_backup_step(-1)`: one read
//! transaction, so a concurrent writer (WAL) neither waits for it nor makes it restart,
//! as a copy in small steps would after every commit of a busy engine.

use crate::error::{CoreError, Result};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::Duration;

/// How often a busy source (WAL recovery, a checkpoint's brief lock) is tried again,
/// and the pause between tries.
const BUSY_TRIES: u32 = 100;
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// What one backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupStats {
    pub pages: u64,
    pub page_size: u64,
    /// `PRAGMA user_version` of the copy: its schema version.
    pub schema_version: i64,
}

/// Copies the database at `src` into a new file `dst` (which must not exist) as one
/// consistent snapshot. The copy is a standalone file in rollback-journal mode (no
/// `-wal` beside it); the store turns WAL back on when it opens it.
pub fn backup_db(src: &Path, dst: &Path) -> Result<BackupStats> {
    if !src.is_file() {
        return Err(CoreError::InvalidInput(format!(
            "{} does not exist",
            src.display()
        )));
    }
    if dst.exists() {
        return Err(CoreError::InvalidInput(format!(
            "{} already exists",
            dst.display()
        )));
    }
    // Read-write without CREATE: a WAL database needs its -shm, and a missing file is
    // an error, never a new empty database.
    let from = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    from.busy_timeout(Duration::from_secs(5))?;
    let mut to = Connection::open(dst)?;
    let (pages, page_size) = {
        let backup = Backup::new(&from, &mut to)?;
        let mut tries = 0;
        loop {
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => {}
                // Busy, Locked (the enum is non-exhaustive).
                _ => {
                    tries += 1;
                    if tries >= BUSY_TRIES {
                        return Err(CoreError::Locked(format!(
                            "{} stayed locked for {} s during the backup; try again",
                            src.display(),
                            (BUSY_PAUSE * BUSY_TRIES).as_secs()
                        )));
                    }
                    std::thread::sleep(BUSY_PAUSE);
                }
            }
        }
        let pages = backup.progress().pagecount;
        let page_size: i64 = from.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        (pages, page_size)
    };
    drop(from);
    let mode: String = to.query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(CoreError::InvalidInput(format!(
            "the copy {} stayed in journal mode {mode}",
            dst.display()
        )));
    }
    let schema_version: i64 = to.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    to.close().map_err(|(_, e)| CoreError::Sqlite(e))?;
    Ok(BackupStats {
        pages: u64::try_from(pages).unwrap_or(0),
        page_size: u64::try_from(page_size).unwrap_or(0),
        schema_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SCHEMA_VERSION;
    use crate::store::Store;

    #[test]
    fn a_copy_taken_while_a_writer_holds_a_transaction_has_the_committed_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("klaw.db");
        let store = Store::open(&src, 4, 1).unwrap();
        store.meta_set("committed", "yes").unwrap();
        // A second writer in the middle of a transaction (the engine mid-turn).
        let busy = Connection::open(&src).unwrap();
        busy.execute_batch(
            "BEGIN IMMEDIATE; INSERT INTO meta(key, value) VALUES ('uncommitted', 'no');",
        )
        .unwrap();

        let dst = dir.path().join("copy.db");
        let stats = backup_db(&src, &dst).unwrap();
        busy.execute_batch("COMMIT").unwrap();
        store.close().unwrap();

        assert_eq!(stats.schema_version, SCHEMA_VERSION);
        assert_eq!(
            std::fs::metadata(&dst).unwrap().len(),
            stats.pages * stats.page_size
        );
        assert!(!dir.path().join("copy.db-wal").exists());
        let copy = Connection::open(&dst).unwrap();
        let keys: Vec<String> = copy
            .prepare("SELECT key FROM meta ORDER BY key")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(keys.contains(&"committed".to_string()));
        assert!(!keys.contains(&"uncommitted".to_string()));
        let ok: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }

    #[test]
    fn a_missing_source_or_an_existing_target_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.db");
        assert!(matches!(
            backup_db(&missing, &dir.path().join("x.db")),
            Err(CoreError::InvalidInput(_))
        ));
        assert!(!missing.exists());
        let src = dir.path().join("a.db");
        Connection::open(&src)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        std::fs::write(dir.path().join("taken.db"), b"mine").unwrap();
        assert!(backup_db(&src, &dir.path().join("taken.db")).is_err());
        assert_eq!(std::fs::read(dir.path().join("taken.db")).unwrap(), b"mine");
    }
}
