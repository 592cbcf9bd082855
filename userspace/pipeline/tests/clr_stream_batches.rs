//! A live source reads a stream a batch at a time (payloads sharing one buffer): the items are
//! those read one at a time, in the same order, field for field.

use clrprobe_pipeline::stream::{ClrStream, Record, StreamItem};

fn item(i: StreamItem) -> Record {
    match i {
        StreamItem::Clr(r) => Record::Clr(r),
        StreamItem::Counter { name, value } => Record::Counter { pid: 7, name: name.into(), value },
    }
}

#[test]
fn batches_give_the_items_read_one_at_a_time() {
    for file in ["perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace", "perfview__speedscope__only_managed_samples.nettrace"] {
        let bytes = clrprobe_tests::corpus::read(file);
        let mut one = ClrStream::new(7, &bytes[..]).expect("header");
        let mut singles = Vec::new();
        while let Some(i) = one.next_item().expect("stream") {
            singles.push(item(i));
        }
        for max in [1, 3, 256] {
            let mut batched = ClrStream::new(7, &bytes[..]).expect("header");
            let (mut got, mut items, mut batches) = (Vec::new(), Vec::new(), 0);
            loop {
                let more = batched.next_items_tapped(&mut |_| {}, &mut items, max).expect("stream");
                assert!(items.len() <= max);
                batches += 1;
                got.extend(items.drain(..).map(item));
                if !more {
                    break;
                }
            }
            assert!(!singles.is_empty(), "{file}");
            assert_eq!(got.len(), singles.len(), "{file}, batches of {max}");
            assert!(got == singles, "{file}, batches of {max}");
            if max == 256 {
                assert!(batches < singles.len() / 4, "{file}: {batches} batches for {} items", singles.len());
            }
        }
    }
}
