//! File names made from names in workload and result files, which are input.

/// The longest stem: file systems refuse names over 255 bytes, and a date and a suffix follow.
const MAX_STEM: usize = 100;

/// A file name stem for `name` that stays in the directory it is joined to: letters, digits,
/// `-`, `_` and `.` are kept, anything else (a path separator, a space, a control character)
/// becomes `_`, and so does a leading `.`; at most 100 characters. A transaction or workload
/// named `../x` must not write outside the directory it was given.
///
/// ```
/// use slipstream_bench::file_stem;
/// assert_eq!(file_stem("new order"), "new_order");
/// assert_eq!(file_stem("../../etc/x"), "_._.._etc_x");
/// assert_eq!(file_stem(""), "_");
/// ```
pub fn file_stem(name: &str) -> String {
    let mut stem: String = name
        .chars()
        .take(MAX_STEM)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    if stem.is_empty() {
        stem.push('_');
    } else if stem.starts_with('.') {
        stem.replace_range(..1, "_");
    }
    stem
}
