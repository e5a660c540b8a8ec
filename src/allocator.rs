//! The process's allocator: mimalloc, asked through its plain entry points whenever they
//! already give the alignment a layout needs.
//!
//! mimalloc's aligned entry points (`mi_malloc_aligned` and its kin, which a general wrapper
//! calls for every layout) serve a block from the size's own free list only while that list
//! has one ready and suitably placed. When the list runs empty they do not refill it, as
//! `mi_malloc` does; for a size that is not a power of two they over-allocate instead, in a
//! larger size class, through mimalloc's slow path. On the request path that held for about
//! ten allocations a request, at some 230 instructions each (bench/README, run 19).
//!
//! Every block `mi_malloc` hands out is aligned to a machine word: block sizes are multiples
//! of a word, and a page's first block is aligned to 16 bytes. So a layout aligned to a word or
//! less (nearly all: buffers, strings, boxes of pointers and integers) takes the plain entry
//! points, and only a wider alignment takes the aligned ones.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every block of `mi_malloc`, `mi_zalloc` and `mi_realloc` has.
const WORD_ALIGN: usize = std::mem::size_of::<usize>();

/// The largest block mimalloc serves from a size class's free list without its general path
/// (`MI_SMALL_SIZE_MAX`, 128 machine words): what a per-request allocation on the hot path
/// should fit.
pub const SMALL_BLOCK: usize = 128 * std::mem::size_of::<usize>();

/// mimalloc as a global allocator (`#[global_allocator]`).
pub struct Allocator;

/// Whether the plain entry points give the alignment `layout` needs.
fn plain(layout: &Layout) -> bool {
    layout.align() <= WORD_ALIGN
}

// SAFETY: every block comes from mimalloc with at least the layout's size and alignment (the
// plain entry points only for alignments they always meet), and goes back through `mi_free`,
// which takes blocks of either kind.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match plain(&layout) {
            true => mi::mi_malloc(layout.size()).cast(),
            false => mi::mi_malloc_aligned(layout.size(), layout.align()).cast(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match plain(&layout) {
            true => mi::mi_zalloc(layout.size()).cast(),
            false => mi::mi_zalloc_aligned(layout.size(), layout.align()).cast(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let ptr = ptr.cast::<c_void>();
        match plain(&layout) {
            true => mi::mi_realloc(ptr, new_size).cast(),
            false => mi::mi_realloc_aligned(ptr, new_size, layout.align()).cast(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size from 1 to 9,000 bytes at every alignment from 1 to 64: the block is aligned,
    /// holds what is written to all of it, grows and shrinks keeping its bytes, and zeroed
    /// blocks are zero.
    #[test]
    fn blocks_have_their_layouts_alignment_and_size() {
        let sizes = (1..=9_000usize)
            .step_by(7)
            .chain([8, 16, 24, 48, 4096, 8192]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: the layouts are non-zero in size; each block is used within its size
                // and freed once, with the layout it was made with.
                unsafe {
                    let p = Allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    std::ptr::write_bytes(p, 0xA5, size);
                    let grown = Allocator.realloc(p, layout, size * 2);
                    assert_eq!(grown as usize % align, 0, "grown {size} align {align}");
                    assert!((0..size).all(|i| *grown.add(i) == 0xA5));
                    let grown_layout = Layout::from_size_align(size * 2, align).unwrap();
                    let shrunk = Allocator.realloc(grown, grown_layout, size.div_ceil(2));
                    assert_eq!(shrunk as usize % align, 0, "shrunk {size} align {align}");
                    assert!((0..size.div_ceil(2)).all(|i| *shrunk.add(i) == 0xA5));
                    let shrunk_layout = Layout::from_size_align(size.div_ceil(2), align).unwrap();
                    Allocator.dealloc(shrunk, shrunk_layout);
                    let z = Allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size} align {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    Allocator.dealloc(z, layout);
                }
            }
        }
    }

    /// A block of a size that is no power of two comes from its own size class, however long
    /// the size is allocated and freed: its free list is refilled, not passed over for a
    /// larger class (mimalloc's aligned entry points over-allocate once it runs empty).
    #[test]
    fn blocks_come_from_their_own_size_class() {
        let layout = Layout::from_size_align(48, 8).unwrap();
        let mut held = Vec::with_capacity(4096);
        for round in 0..64 {
            // SAFETY: each block is freed once, with the layout it was made with.
            unsafe {
                for _ in 0..4096 {
                    held.push(Allocator.alloc(layout));
                }
                for (i, &p) in held.iter().enumerate() {
                    let usable = mi::mi_usable_size(p.cast::<c_void>());
                    assert_eq!(
                        usable, 48,
                        "round {round}, block {i}: {usable} bytes usable"
                    );
                }
                for p in held.drain(..) {
                    Allocator.dealloc(p, layout);
                }
            }
        }
    }

    /// The plain entry points are taken for word alignment and below only.
    #[test]
    fn only_word_alignment_takes_the_plain_entry_points() {
        for (align, expected) in [(1, true), (8, true), (16, false), (4096, false)] {
            let layout = Layout::from_size_align(64, align).unwrap();
            assert_eq!(plain(&layout), expected, "align {align}");
        }
    }
}
