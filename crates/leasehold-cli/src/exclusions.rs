//! `node --exclude` and `--exclude-file`: partition lists such as `3,5,10-20`.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use leasehold::PartitionId;

/// The most partitions one range may name: a typo such as `1-4000000000` is refused rather
/// than expanded.
const MAX_RANGE: u32 = 1 << 20;

/// Parses a list of partitions and ranges separated by commas, spaces or newlines, with `#`
/// starting a comment to the end of the line: `3, 5, 10-20`.
pub fn parse(text: &str) -> anyhow::Result<BTreeSet<PartitionId>> {
    let mut partitions = BTreeSet::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        for item in line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|item| !item.is_empty())
        {
            let number = |text: &str| {
                text.parse::<u32>().with_context(|| {
                    format!("{item:?} is not a partition number or a range such as 10-20")
                })
            };
            match item.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (number(first)?, number(last)?);
                    if first > last {
                        anyhow::bail!("range {item} runs backwards");
                    }
                    if last - first >= MAX_RANGE {
                        anyhow::bail!("range {item} names more than {MAX_RANGE} partitions");
                    }
                    partitions.extend((first..=last).map(PartitionId));
                }
                None => {
                    partitions.insert(PartitionId(number(item)?));
                }
            }
        }
    }
    Ok(partitions)
}

/// Reads and parses an exclusion file, naming the file in any error.
pub fn read(path: &Path) -> anyhow::Result<BTreeSet<PartitionId>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the exclusion file {}", path.display()))?;
    parse(&text).with_context(|| format!("in the exclusion file {}", path.display()))
}

/// The list from `--exclude` and `--exclude-file` together.
pub fn combined(
    listed: Option<&str>,
    file: Option<&Path>,
) -> anyhow::Result<BTreeSet<PartitionId>> {
    let mut partitions = match listed {
        Some(text) => parse(text).context("in --exclude")?,
        None => BTreeSet::new(),
    };
    if let Some(path) = file {
        partitions.extend(read(path)?);
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(text: &str) -> Vec<u32> {
        parse(text).unwrap().into_iter().map(|p| p.0).collect()
    }

    #[test]
    fn lists_ranges_comments_and_separators() {
        assert_eq!(numbers("3,5,10-12"), vec![3, 5, 10, 11, 12]);
        assert_eq!(
            numbers("7\n 1 , 2 # the rest\n# all comment\n\n4-4"),
            vec![1, 2, 4, 7]
        );
        assert!(numbers("").is_empty());
    }

    #[test]
    fn bad_items_are_named() {
        for (text, needle) in [
            ("3,x", "\"x\""),
            ("5-2", "runs backwards"),
            ("-4", "\"-4\""),
            ("1-99999999", "more than"),
            ("4294967296", "\"4294967296\""),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
