//! [`ColorCell`]: state that only events of one color may touch, with no lock.
//!
//! Invariant and why it is sound: the value is reached only through [`ColorCell::with`], which
//! checks that the running event has the cell's color. Two events of one color never run at the
//! same time, and consecutive events of a color are ordered by the runtime (same worker: program
//! order; lent to another worker: the loan and forward messages are release/acquire hand-offs), so
//! the accesses are never concurrent and each sees the previous one's writes. A flag refuses
//! re-entrant access from inside `with`. This is the colored-events idiom of the seeds (the web
//! server's active-connection counter, shared by Accept and DecAcceptedClients through one color)
//! without `unsafe` in user code.
//!
//! For a color that admits readers ([`Color::with_readers`]), [`ColorCell::read`] also opens the
//! value, shared, inside a read of the color: reads never run beside an exclusive event of it
//! (`reader`), and touch neither the value mutably nor the borrow flag.

use std::cell::{Cell, UnsafeCell};

use crate::context::current_color;
use crate::{Color, Error};

/// A value owned by a color.
///
/// Events of the color open it with [`with`](Self::with); anything else (another color's event,
/// a thread outside the runtime) gets [`Error::WrongColor`]. After a run, the value is read
/// through ownership: every event that held a clone of the cell's `Arc` has run and dropped it.
///
/// ```
/// use std::sync::Arc;
/// use ochre::{Color, ColorCell, Runtime};
///
/// let rt = Runtime::builder().workers(2).pin(false).build()?;
/// let total = Arc::new(ColorCell::new(Color(0), 0u64));
/// let t = total.clone();
/// rt.run(Color(0), move || {
///     for i in 1..=100u64 {
///         let t = t.clone();
///         // Work on a color of its own, the result back on the total's color.
///         ochre::post(Color(i), move || {
///             let square = i * i;
///             ochre::post(Color(0), move || t.with(|v| *v += square).expect("total's color"));
///         });
///     }
/// })?;
/// // Outside the runtime `total.with(..)` is refused; the run is over, so the cell is ours.
/// assert!(total.with(|v| *v).is_err());
/// let total = Arc::try_unwrap(total).expect("every event ran").into_inner();
/// assert_eq!(total, (1..=100u64).map(|i| i * i).sum());
/// # Ok::<(), ochre::Error>(())
/// ```
pub struct ColorCell<T> {
    color: Color,
    borrowed: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: the value moves between threads only with the events of its color (it needs `Send`);
// shared references to the cell open it only inside events of that color, which never run
// concurrently and are ordered by the runtime (module doc), so there is no data race.
unsafe impl<T: Send> Sync for ColorCell<T> {}

impl<T> ColorCell<T> {
    /// A cell owned by `color`.
    pub fn new(color: Color, value: T) -> Self {
        ColorCell { color, borrowed: Cell::new(false), value: UnsafeCell::new(value) }
    }

    /// The owning color.
    pub fn color(&self) -> Color {
        self.color
    }

    /// Runs `f` on the value. Only from an event of the cell's color, and not from inside another
    /// `with` on the same cell: otherwise [`Error::WrongColor`], and `f` is not called.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Result<R, Error> {
        let current = current_color();
        if current != Some(self.color) {
            return Err(Error::WrongColor { owner: self.color, current });
        }
        if self.borrowed.replace(true) {
            return Err(Error::WrongColor { owner: self.color, current });
        }
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _release = Release(&self.borrowed);
        // SAFETY: we run in an event of the owning color and hold the borrow flag, so no other
        // reference to the value exists now (module doc).
        Ok(f(unsafe { &mut *self.value.get() }))
    }

    /// Runs `f` on a shared reference to the value: from an exclusive event of the cell's color
    /// (not inside its `with`), or from a read of it ([`post_read`](crate::post_read)), which may
    /// run beside other reads on other threads (hence `T: Sync`). Otherwise
    /// [`Error::WrongColor`], and `f` is not called.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> Result<R, Error>
    where
        T: Sync,
    {
        if crate::reader::current_read() == Some(self.color) {
            // SAFETY: a read of the owning color runs: no exclusive event of it runs now, and
            // the reader-writer word orders this read after the last one's writes (`reader`,
            // Acquire/Release); other reads only take shared references (`T: Sync`). `with`
            // refuses inside a read (its color is the lane's), so no `&mut` exists.
            return Ok(f(unsafe { &*self.value.get() }));
        }
        self.with(|v| f(v))
    }

    /// The value, through exclusive ownership of the cell.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The value.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T> std::fmt::Debug for ColorCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColorCell").field("color", &self.color).finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reader::reading;

    /// Reads of a reader color's cell on two threads at once (as reads on two workers): shared
    /// references only (Miri checks there is no data race); writing is refused inside a read,
    /// and a read of another color opens nothing.
    #[test]
    fn reads_share_the_value_and_cannot_write_it() {
        let c = Color::with_readers(3);
        let cell = std::sync::Arc::new(ColorCell::new(c, vec![1u32, 2, 3]));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let cell = cell.clone();
                std::thread::spawn(move || {
                    reading(c, || {
                        assert_eq!(cell.read(|v| v.iter().sum::<u32>()).unwrap(), 6);
                        assert!(cell.with(|v| v.push(4)).is_err(), "a read cannot write");
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        reading(Color::with_readers(4), || assert!(cell.read(|v| v.len()).is_err()));
        assert!(cell.read(|v| v.len()).is_err(), "outside any event of the color");
    }
}
