#![allow(unsafe_code)] // a GlobalAlloc is unsafe by definition: each call is commented

//! The global allocator: mimalloc, called through its plain entry points whenever the
//! alignment asked for is one every mimalloc block already has.
//!
//! The `mimalloc` crate's allocator always calls `mi_malloc_aligned`, whose fast path covers
//! only blocks up to 1 KiB that happen to be aligned; anything larger (header maps, the 4 KiB
//! buffers of every request) takes the generic aligned path, ~170 instructions more each.
//! Measured with callgrind: 22 of the ~90 allocations of a proxied request took it. Every
//! mimalloc block is aligned to a machine word, so for alignments up to a word the plain
//! `mi_malloc` / `mi_zalloc` / `mi_realloc` are exact; larger alignments keep the aligned
//! entry points. (bench/bare-pingora uses this file too, so the floor keeps Tollgate's
//! allocator.)

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// Every mimalloc block is at least this aligned (mimalloc's `MI_INTPTR_SIZE`).
const WORD: usize = std::mem::size_of::<usize>();

pub struct MiMalloc;

// SAFETY: each method hands the layout's size (and, above a word, its alignment) to
// mimalloc, which returns null or a block of at least that size and alignment; `dealloc`
// and `realloc` receive only pointers mimalloc returned.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size class from a byte to 1 MiB, at every alignment from 1 to 4 KiB: the block is
    /// aligned, writable across its whole size, and survives growing and shrinking with its
    /// contents intact.
    #[test]
    fn blocks_are_aligned_and_whole() {
        let a = MiMalloc;
        let mut size = 1usize;
        while size <= 1 << 20 {
            for shift in 0..=12 {
                let align = 1usize << shift;
                let layout = Layout::from_size_align(size, align).expect("layout");
                // SAFETY: a non-zero size; the block is used within its layout and freed once.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null(), "{size} bytes at {align}");
                    assert_eq!(p as usize % align, 0, "{size} bytes at {align}");
                    std::ptr::write_bytes(p, 0xA5, size);
                    let grown = a.realloc(p, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "grown {size} at {align}");
                    assert_eq!(*grown.add(size - 1), 0xA5);
                    let shrunk = a.realloc(
                        grown,
                        Layout::from_size_align(size * 3, align).expect("layout"),
                        size,
                    );
                    assert_eq!(shrunk as usize % align, 0, "shrunk {size} at {align}");
                    assert_eq!(*shrunk, 0xA5);
                    a.dealloc(shrunk, layout);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size} at {align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    a.dealloc(z, layout);
                }
            }
            size = if size < 64 { size + 1 } else { size * 2 + 7 };
        }
    }
}
