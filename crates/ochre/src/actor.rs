//! Actors: state kept by the runtime for one color, reached by messages through a `Copy`
//! address ([`Addr`]) that touches no shared count.
//!
//! The colored-event way to write an actor is a [`ColorCell`](crate::ColorCell) in an `Arc`,
//! cloned into every message; that clone and its drop are two atomic writes per message on a
//! line that the sender's and the receiver's workers pass back and forth (measured on the actor
//! benchmarks: 10-30% of a message's cost on the rings, fork-join and counting). Here the runtime
//! owns the state and a message carries one word: the state's address with a generation in its
//! low bits (a slot is aligned to 128 bytes), so that a message of up to two words still travels
//! inline to another worker (`message::INLINE_BYTES`).
//!
//! Invariants, and why [`Slot::run`]'s access is sound:
//! - A slot is allocated by the runtime's [`Actors`] registry and freed only when the registry
//!   is dropped, with the runtime's shared state (the last `Arc<Shared>`): no event of the
//!   runtime runs then, since a running worker holds that `Arc`. A message is posted only to the
//!   runtime that owns its slot (`Addr::runtime` is checked against the poster's runtime), so
//!   while it runs its slot is allocated.
//! - `gen` names the slot's current actor. It changes only when the actor stops, inside an event
//!   of the actor's color, after the state is dropped; the slot is then free for a new actor of
//!   the same type (another color, maybe). A message whose generation is not the slot's is
//!   dropped without touching the state. Generations are below [`GENERATIONS`] (they fit the
//!   address's low bits): a slot whose last generation stops is retired, never reused, so no
//!   old address can name a later actor of it.
//! - While `gen` matches, the message runs as an exclusive event of the actor's color: events of
//!   a color never run at the same time and are ordered by the runtime, and no other code reaches
//!   the state (messages run at the top of an event, never nested), so the `&mut` is unique. An
//!   event of an older actor's color that reads a reused slot reads `gen` only (an atomic): its
//!   actor's stop happened before it (same color), so it sees the new generation.
//! - [`Addr::read`] posts a read of the color (`reader`): it never runs beside an exclusive event
//!   of the color (a message, the stop), so it takes `&S` beside other reads (`S: Sync`).

use std::any::TypeId;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{Color, Error};

/// An actor's state and generation, alone on its cache lines (actors on different workers do
/// not share lines, as two tokio tasks do not). The alignment also frees the address's low bits
/// for the generation (`Tagged`).
#[repr(align(128))]
pub(crate) struct Slot<S> {
    gen: AtomicU64,
    state: UnsafeCell<Option<S>>,
}

/// Generations a slot serves before it is retired: one per value of the address's low bits.
pub(crate) const GENERATIONS: u64 = 128;

/// What [`Slot::stop`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The actor had stopped already (or the slot serves another one).
    NotLive,
    /// The state is dropped and the slot may serve a new actor.
    Reusable,
    /// The state is dropped and the slot served its last generation.
    Retired,
}

impl<S> Slot<S> {
    /// The slot, if it still holds actor `gen` (its state may have been taken by a stop that
    /// panicked in the state's drop).
    ///
    /// # Safety
    ///
    /// `slot` comes from the [`Actors`] registry that is still alive (module doc).
    #[inline]
    unsafe fn holding<'a>(slot: NonNull<Slot<S>>, gen: u64) -> Option<&'a Slot<S>> {
        // SAFETY: the slot is allocated (caller); `gen` is an atomic, fine to read from any
        // actor's event.
        let here = unsafe { slot.as_ref() };
        (here.gen.load(Ordering::Acquire) == gen).then_some(here)
    }

    /// Runs `f` on the state if the slot still holds actor `gen`; false if it has stopped.
    ///
    /// # Safety
    ///
    /// `slot` comes from the [`Actors`] registry that is still alive, and the caller runs as an
    /// exclusive event of actor `gen`'s color at the top of the event (module doc).
    #[inline]
    pub(crate) unsafe fn run(slot: NonNull<Slot<S>>, gen: u64, f: impl FnOnce(&mut S)) -> bool {
        // SAFETY: caller.
        let Some(here) = (unsafe { Self::holding(slot, gen) }) else { return false };
        // SAFETY: the generation matches, so this event is of the live actor's color and runs
        // exclusively at the top of its event: no other reference to the state exists.
        unsafe { (*here.state.get()).as_mut() }.map(f).is_some()
    }

    /// Runs `f` on a shared reference to the state if the slot still holds actor `gen`.
    ///
    /// # Safety
    ///
    /// `slot` comes from the [`Actors`] registry that is still alive, and the caller runs as a
    /// read of actor `gen`'s color or as an exclusive event of it (module doc): no `&mut` to the
    /// state exists meanwhile; other reads may hold `&S` (hence `S: Sync`).
    #[inline]
    pub(crate) unsafe fn read(slot: NonNull<Slot<S>>, gen: u64, f: impl FnOnce(&S)) -> bool
    where
        S: Sync,
    {
        // SAFETY: caller.
        let Some(here) = (unsafe { Self::holding(slot, gen) }) else { return false };
        // SAFETY: a read never runs beside an exclusive event of its color (`reader`), and the
        // messages and the stop are exclusive events: only shared references exist now.
        unsafe { (*here.state.get()).as_ref() }.map(f).is_some()
    }

    /// Ends actor `gen`: drops its state and moves the slot to the next generation, or retires
    /// it after the last one.
    ///
    /// # Safety
    ///
    /// As [`Slot::run`].
    pub(crate) unsafe fn stop(slot: NonNull<Slot<S>>, gen: u64) -> Stopped {
        // SAFETY: caller.
        let Some(here) = (unsafe { Self::holding(slot, gen) }) else { return Stopped::NotLive };
        // SAFETY: as in `run`; the state is dropped before the generation moves on, so no
        // later event (same color: ordered after this one) can reach it.
        let state = unsafe { (*here.state.get()).take() };
        drop(state);
        // A retired slot's generation is `GENERATIONS`, which no address carries.
        here.gen.store(gen + 1, Ordering::Release);
        if gen + 1 < GENERATIONS {
            Stopped::Reusable
        } else {
            Stopped::Retired
        }
    }
}

/// A slot's address with a generation in its low bits: what a message carries.
struct Tagged<S> {
    bits: NonNull<u8>,
    _state: PhantomData<fn(S) -> S>,
}

impl<S> Clone for Tagged<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Tagged<S> {}

// SAFETY: as `Addr`: only the actor's events dereference it, on the runtime's workers.
unsafe impl<S: Send> Send for Tagged<S> {}

impl<S> Tagged<S> {
    fn new(slot: NonNull<Slot<S>>, gen: u64) -> Tagged<S> {
        const { assert!(std::mem::align_of::<Slot<()>>() as u64 == GENERATIONS) };
        debug_assert!(gen < GENERATIONS);
        // The low bits of a slot's address are zero (its alignment); the generation goes there.
        Tagged { bits: slot.cast::<u8>().map_addr(|a| a | gen as usize), _state: PhantomData }
    }

    fn slot(self) -> NonNull<Slot<S>> {
        let p = self.bits.as_ptr().map_addr(|a| a & !(GENERATIONS as usize - 1));
        // SAFETY: the bits cleared are the generation's; what is left is the slot's address,
        // which is not null.
        unsafe { NonNull::new_unchecked(p) }.cast()
    }

    fn gen(self) -> u64 {
        (self.bits.addr().get() & (GENERATIONS as usize - 1)) as u64
    }
}

impl<S> PartialEq for Tagged<S> {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
    }
}

/// A slot's address, as the registry keeps it (typed again by the `TypeId` it is filed under).
struct Free(NonNull<()>);

// SAFETY: a free slot holds no state (`None`); its address moves between threads under the
// registry's lock only.
unsafe impl Send for Free {}

/// The runtime's actors: every slot it ever allocated (owned, dropped with it) and the slots of
/// stopped actors, per state type, for new actors to reuse.
#[derive(Default)]
pub(crate) struct Actors {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    owned: Vec<Owned>,
    free: HashMap<TypeId, Vec<Free>>,
}

/// A slot the registry owns, dropped (with its state, if live) when the registry drops.
struct Owned {
    ptr: NonNull<()>,
    drop: unsafe fn(NonNull<()>),
}

// SAFETY: it owns a `Box<Slot<S>>` with `S: Send`; dropped on whichever thread drops the
// registry, when no event runs (module doc).
unsafe impl Send for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `drop` is `drop_slot::<S>` for the `S` this pointer was boxed with, and each
        // `Owned` drops its slot once.
        unsafe { (self.drop)(self.ptr) }
    }
}

/// # Safety
///
/// `ptr` is a `Box<Slot<S>>` turned into a pointer, not dropped yet.
unsafe fn drop_slot<S>(ptr: NonNull<()>) {
    // SAFETY: caller.
    drop(unsafe { Box::from_raw(ptr.cast::<Slot<S>>().as_ptr()) });
}

impl Actors {
    /// A slot holding `state` (a stopped actor's slot of the same type, or a new one), and the
    /// generation that names this actor.
    pub(crate) fn insert<S: Send + 'static>(&self, state: S) -> (NonNull<Slot<S>>, u64) {
        let mut registry = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Free(ptr)) = registry.free.get_mut(&TypeId::of::<S>()).and_then(Vec::pop) {
            let slot = ptr.cast::<Slot<S>>();
            // SAFETY: filed under `S`'s type, so a `Slot<S>`; free, so no event reaches its
            // state (its generation moved on) and the registry's lock orders this write after
            // the stop that freed it.
            let here = unsafe { slot.as_ref() };
            // SAFETY: as above: nothing else reaches the state of a free slot.
            unsafe { *here.state.get() = Some(state) };
            return (slot, here.gen.load(Ordering::Relaxed));
        }
        let boxed = Box::new(Slot { gen: AtomicU64::new(0), state: UnsafeCell::new(Some(state)) });
        let slot = NonNull::from(Box::leak(boxed));
        registry.owned.push(Owned { ptr: slot.cast(), drop: drop_slot::<S> });
        (slot, 0)
    }

    /// Files a stopped actor's slot for reuse.
    pub(crate) fn release<S: 'static>(&self, slot: NonNull<Slot<S>>) {
        let mut registry = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        registry.free.entry(TypeId::of::<S>()).or_default().push(Free(slot.cast()));
    }

    /// Slots allocated so far (live actors and reusable ones).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn slots(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).owned.len()
    }
}

/// The address of an actor: a state of type `S` that the runtime keeps, reached only by
/// messages, each an event of the actor's color. `Copy`: sending touches no count shared with
/// the actor, so a message costs what a [`post`](crate::post) costs.
///
/// Made by [`Runtime::actor`](crate::Runtime::actor), [`Handle::actor`](crate::Handle::actor)
/// or, in a handler, [`actor`]. Messages from one poster run in the order sent (they are events
/// of one color); [`stop`](Addr::stop) drops the state, and messages that arrive after it are
/// dropped unrun. A state lives until its actor stops or the runtime is dropped.
///
/// ```
/// use ochre::{Color, Runtime};
///
/// let rt = Runtime::builder().workers(2).pin(false).build()?;
/// let total = rt.actor(Color(1), 0u64);
/// rt.run(Color(0), move || {
///     for i in 1..=100u64 {
///         // Work on a color of its own, the result sent to the actor.
///         ochre::post(Color(100 + i), move || total.send(move |t| *t += i * i));
///     }
/// })?;
/// // From outside the runtime: a message through a handle, run by the next run.
/// let (tx, rx) = std::sync::mpsc::channel();
/// rt.handle().send(total, move |t| tx.send(*t).unwrap())?;
/// rt.run(Color(0), || {})?;
/// assert_eq!(rx.recv().unwrap(), (1..=100u64).map(|i| i * i).sum());
/// # Ok::<(), ochre::Error>(())
/// ```
pub struct Addr<S> {
    tagged: Tagged<S>,
    color: Color,
    runtime: u64,
}

impl<S> Clone for Addr<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Addr<S> {}

// SAFETY: an address is a pointer the holder never dereferences; only the actor's events do,
// on the runtime's workers, which is why `S: Send` is needed (the state is reached from
// whichever worker runs the color).
unsafe impl<S: Send> Send for Addr<S> {}
// SAFETY: as above: `&Addr` gives nothing more than a copy of it.
unsafe impl<S: Send> Sync for Addr<S> {}

impl<S> std::fmt::Debug for Addr<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gen = self.tagged.gen();
        f.debug_struct("Addr").field("color", &self.color).field("gen", &gen).finish()
    }
}

impl<S> PartialEq for Addr<S> {
    fn eq(&self, other: &Self) -> bool {
        self.tagged == other.tagged && self.runtime == other.runtime
    }
}

impl<S> Eq for Addr<S> {}

impl<S: Send + 'static> Addr<S> {
    pub(crate) fn new(actors: &Actors, runtime: u64, color: Color, state: S) -> Addr<S> {
        let (slot, gen) = actors.insert(state);
        Addr { tagged: Tagged::new(slot, gen), color, runtime }
    }

    /// The actor's color: its messages are events of it.
    pub fn color(&self) -> Color {
        self.color
    }

    /// The message for `f`: the event that runs it on the state.
    pub(crate) fn message(
        self,
        f: impl FnOnce(&mut S) + Send + 'static,
    ) -> impl FnOnce() + Send + 'static {
        // One word and `f`: the color and the runtime stay behind.
        let tagged = self.tagged;
        move || {
            // SAFETY: the message is posted only to the runtime that owns the slot (`post`,
            // `Handle::send` check it), as an exclusive event of the actor's color, and runs at
            // the top of its event (module doc).
            unsafe { Slot::run(tagged.slot(), tagged.gen(), f) };
        }
    }

    /// Posts `event` as an event of the actor's color, from a handler of the actor's runtime;
    /// `None` elsewhere. (An `Option`, not a `Result`: a `Result` dropped on every send cost 2% of
    /// a message, as `post` found.)
    #[inline]
    fn post(self, event: impl FnOnce() + Send + 'static) -> Option<()> {
        crate::context::post_in(self.runtime, self.color, event)
    }

    /// Sends `f` to the actor, from a handler of the actor's runtime: it runs on the state as an
    /// event of the actor's color (dropped unrun if the actor has stopped by then).
    ///
    /// # Panics
    ///
    /// Outside a handler, or in a handler of another runtime: use
    /// [`Handle::send`](crate::Handle::send) from other threads, or [`try_send`](Addr::try_send).
    #[inline]
    pub fn send(self, f: impl FnOnce(&mut S) + Send + 'static) {
        if self.post(self.message(f)).is_none() {
            refused("ochre::Addr::send");
        }
    }

    /// Like [`send`](Addr::send), but [`Error::NotInRuntime`] outside a handler of the actor's
    /// runtime instead of a panic.
    #[inline]
    pub fn try_send(self, f: impl FnOnce(&mut S) + Send + 'static) -> Result<(), Error> {
        self.post(self.message(f)).ok_or(Error::NotInRuntime)
    }

    /// Sends `f` to read the state, as a read of the actor's color
    /// ([`post_read`](crate::post_read)): for a color made with
    /// [`Color::with_readers`](crate::Color::with_readers), reads run beside each other (on the
    /// poster's worker, at once when they can), never beside the actor's messages; for another
    /// color, as a message. From a handler of the actor's runtime.
    ///
    /// # Panics
    ///
    /// As [`send`](Addr::send).
    pub fn read(self, f: impl FnOnce(&S) + Send + 'static)
    where
        S: Sync,
    {
        let ours = crate::context::in_runtime(self.runtime, |_| ()).is_some();
        let tagged = self.tagged;
        let read = move || {
            // SAFETY: posted only to the runtime that owns the slot (checked above), as a read
            // of the actor's color (module doc).
            unsafe { Slot::read(tagged.slot(), tagged.gen(), f) };
        };
        if !ours || crate::reader::try_post_read(self.color, read).is_err() {
            refused("ochre::Addr::read");
        }
    }

    /// Stops the actor: an event of its color, after the messages sent before it by the same
    /// poster, drops the state; messages that arrive later are dropped unrun. From a handler of
    /// the actor's runtime ([`Handle::stop_actor`](crate::Handle::stop_actor) from other threads).
    ///
    /// # Panics
    ///
    /// As [`send`](Addr::send).
    pub fn stop(self) {
        if self.post(self.stopping()).is_none() {
            refused("ochre::Addr::stop");
        }
    }

    /// The event that stops the actor.
    pub(crate) fn stopping(self) -> impl FnOnce() + Send + 'static {
        let tagged = self.tagged;
        move || {
            // SAFETY: as in `message`.
            if unsafe { Slot::stop(tagged.slot(), tagged.gen()) } == Stopped::Reusable {
                crate::context::with_current(|ctx| ctx.shared.actors.release(tagged.slot()));
            }
        }
    }

    /// The actor's runtime.
    pub(crate) fn runtime(&self) -> u64 {
        self.runtime
    }
}

/// Why a send or a stop was refused: outside any handler, or in another runtime's.
#[cold]
#[inline(never)]
fn refused(what: &str) -> ! {
    if crate::context::with_current(|_| ()).is_some() {
        panic!("{what}: the actor belongs to another runtime than this handler's");
    }
    crate::context::not_in_runtime(what)
}

/// A new actor of `color` holding `state`, in the runtime running the current handler.
///
/// # Panics
///
/// Outside a handler: use [`Handle::actor`](crate::Handle::actor) from other threads.
pub fn actor<S: Send + 'static>(color: Color, state: S) -> Addr<S> {
    match crate::context::with_current(|ctx| {
        Addr::new(&ctx.shared.actors, ctx.shared.id, color, state)
    }) {
        Some(addr) => addr,
        None => panic!("ochre::actor: {}", Error::NotInRuntime),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts its drops.
    struct Tracked(Arc<AtomicUsize>, u64);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_message_reaches_the_state_of_its_generation_only() {
        let drops = Arc::new(AtomicUsize::new(0));
        let actors = Actors::default();
        let (slot, gen) = actors.insert(Tracked(drops.clone(), 1));
        // SAFETY: the registry is alive; this test is the only code reaching the slot.
        unsafe {
            assert!(Slot::run(slot, gen, |t| t.1 += 1));
            assert!(Slot::run(slot, gen, |t| assert_eq!(t.1, 2)));
            assert_eq!(Slot::stop(slot, gen), Stopped::Reusable);
            assert_eq!(drops.load(Ordering::SeqCst), 1, "stop drops the state");
            assert!(!Slot::run(slot, gen, |_| panic!("a stopped actor's message ran")));
            assert_eq!(Slot::stop(slot, gen), Stopped::NotLive, "stopping twice");
        }
        actors.release(slot);
        // The freed slot goes to the next actor of the type, under a new generation.
        let (again, gen2) = actors.insert(Tracked(drops.clone(), 10));
        assert_eq!(again, slot);
        assert_ne!(gen2, gen);
        assert_eq!(actors.slots(), 1);
        // SAFETY: as above.
        unsafe {
            assert!(!Slot::run(slot, gen, |_| panic!("an old address reached the new actor")));
            assert!(Slot::run(again, gen2, |t| assert_eq!(t.1, 10)));
        }
        // Another type gets a slot of its own.
        let (other, _) = actors.insert(7u32);
        assert_ne!(other.cast::<()>(), slot.cast::<()>());
        assert_eq!(actors.slots(), 2);
        drop(actors);
        assert_eq!(drops.load(Ordering::SeqCst), 2, "the registry drops the live state");
    }

    #[test]
    fn the_registry_drops_live_states_and_not_stopped_ones_twice() {
        let drops = Arc::new(AtomicUsize::new(0));
        let actors = Actors::default();
        let live: Vec<_> = (0..5).map(|i| actors.insert(Tracked(drops.clone(), i))).collect();
        for &(slot, gen) in &live[..2] {
            // SAFETY: the registry is alive; nothing else reaches the slots.
            assert_eq!(unsafe { Slot::stop(slot, gen) }, Stopped::Reusable);
            actors.release(slot);
        }
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        drop(actors);
        assert_eq!(drops.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_slot_serves_its_generations_then_retires_and_tags_keep_both_halves() {
        let actors = Actors::default();
        let (first, _) = actors.insert(0u8);
        let mut gens = Vec::new();
        let mut slot = first;
        let mut gen = 0;
        for round in 0..GENERATIONS {
            let tagged = Tagged::new(slot, gen);
            assert_eq!((tagged.slot(), tagged.gen()), (slot, gen));
            gens.push(gen);
            // SAFETY: the registry is alive; nothing else reaches the slot.
            let stopped = unsafe { Slot::stop(slot, gen) };
            if round + 1 < GENERATIONS {
                assert_eq!(stopped, Stopped::Reusable);
                actors.release(slot);
                (slot, gen) = actors.insert(round as u8);
                assert_eq!(slot, first, "a stopped slot is reused");
            } else {
                assert_eq!(stopped, Stopped::Retired);
            }
        }
        assert_eq!(gens, (0..GENERATIONS).collect::<Vec<_>>());
        // Retired: every tag refused, and the next actor gets a new slot.
        for g in 0..GENERATIONS {
            // SAFETY: as above.
            assert!(!unsafe { Slot::run(first, g, |_| panic!("a retired slot ran")) });
        }
        let (next, gen) = actors.insert(9u8);
        assert_ne!(next, first);
        assert_eq!(gen, 0);
        assert_eq!(actors.slots(), 2);
    }
}
