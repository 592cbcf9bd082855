//! V6-only tables: threads (index -> OS ids) and label lists (index -> activity ids).

use super::id_hash::IdMap;

use super::bytes::{BufResult, Cursor};

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ThreadInfo {
    pub os_thread_id: Option<u64>,
    pub os_process_id: Option<u64>,
}

#[derive(Default)]
pub(crate) struct ThreadTable {
    map: IdMap<u64, ThreadInfo>,
}

impl ThreadTable {
    pub(crate) fn add_block(&mut self, body: &[u8]) -> BufResult<()> {
        let mut c = Cursor::new(body);
        while !c.is_empty() {
            let size = c.u16("thread row size")?;
            let mut row = c.sub(usize::from(size), "thread row")?;
            let index = row.varu64("thread index")?;
            let mut info = ThreadInfo::default();
            while !row.is_empty() {
                match row.u8("thread info kind")? {
                    1 => {
                        row.utf8("thread name")?;
                    }
                    2 => info.os_process_id = Some(row.varu64("OS process id")?),
                    3 => info.os_thread_id = Some(row.varu64("OS thread id")?),
                    4 => {
                        row.utf8("key")?;
                        row.utf8("value")?;
                    }
                    _ => return Err(row.err("unknown thread info kind")),
                }
            }
            self.map.insert(index, info);
        }
        Ok(())
    }

    /// OS thread id of an index, or the index itself when the stream gave none.
    #[inline]
    pub(crate) fn os_thread_id(&self, index: u64) -> u64 {
        self.map
            .get(&index)
            .and_then(|t| t.os_thread_id)
            .unwrap_or(index)
    }

    pub(crate) fn remove(&mut self, index: u64) {
        self.map.remove(&index);
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}

/// Activity ids of one label list (other label kinds are parsed and dropped).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Labels {
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
}

#[derive(Default)]
pub(crate) struct LabelTable {
    lists: IdMap<u32, Labels>,
}

impl LabelTable {
    pub(crate) fn add_block(&mut self, body: &[u8]) -> BufResult<()> {
        let mut c = Cursor::new(body);
        let first = c.u32("first label list index")?;
        if first == 0 {
            return Err(c.err("label list index 0 is reserved"));
        }
        let count = c.u32("label list count")?;
        if u64::from(count) > c.remaining() as u64 {
            return Err(c.err("label list count larger than the block"));
        }
        for i in 0..count {
            let mut labels = Labels::default();
            loop {
                let kind = c.u8("label kind")?;
                match kind & 0x7f {
                    1 => labels.activity_id = c.guid("activity id")?,
                    2 => labels.related_activity_id = c.guid("related activity id")?,
                    3 => c.skip(16, "trace id")?,
                    4 => c.skip(8, "span id")?,
                    5 => {
                        c.utf8("label key")?;
                        c.utf8("label value")?;
                    }
                    6 => {
                        c.utf8("label key")?;
                        c.vari64("label value")?;
                    }
                    7 | 9 | 10 => c.skip(1, "label byte")?,
                    8 => c.skip(8, "label keywords")?,
                    _ => return Err(c.err("unknown label kind")),
                }
                if kind & 0x80 != 0 {
                    break;
                }
            }
            self.lists.insert(first.wrapping_add(i), labels);
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Labels {
        if id == 0 {
            return Labels::default();
        }
        self.lists.get(&id).copied().unwrap_or_default()
    }

    pub(crate) fn clear(&mut self) {
        self.lists.clear();
    }
}
