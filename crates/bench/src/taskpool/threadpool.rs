//! A replica of Asterisk's threadpool design (main/threadpool.c), the baseline of
//! `tandem bench taskpool`. It keeps the structure that makes that design slow, on purpose:
//!
//! - one work queue shared by every worker (a taskprocessor: a mutex-protected list, one task
//!   popped per lock, an `executing` flag);
//! - the pool's own lock held around every push, and taken again by a worker before every task;
//! - every push also queues a management task ("task pushed") on a control queue served by its own
//!   thread (a taskprocessor with the default listener: a semaphore posted on every push); that
//!   task wakes every idle worker; a worker that finds the queue empty queues an "emptied" and an
//!   "idle" management task and sleeps until the control thread activates it again;
//! - a worker checks it is still alive (its own lock) before every task;
//! - a serializer is a second taskprocessor whose first push (when it was empty and not
//!   executing) pushes an `execute_tasks` job to the pool, which runs the serializer's tasks one
//!   per lock until it is empty.
//!
//! It exists only as a measuring stick; Tandem code uses the `taskpool` crate. Its queues are
//! unbounded, as Asterisk's are; the benchmark keeps a fixed number of tasks in flight (one per
//! chain), which bounds them.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Task = Box<dyn FnOnce() + Send + 'static>;

/// A taskprocessor's queue.
struct TpsQueue {
    tasks: VecDeque<Task>,
    executing: bool,
}

impl TpsQueue {
    fn new() -> Self {
        TpsQueue {
            tasks: VecDeque::new(),
            executing: false,
        }
    }

    /// Appends a task; returns `was_empty` as Asterisk's taskprocessor computes it.
    fn push(&mut self, task: Task) -> bool {
        let previous = self.tasks.len();
        self.tasks.push_back(task);
        !self.executing && previous == 0
    }
}

/// Runs one task of `q`, Asterisk's `ast_taskprocessor_execute`: returns (ran, size after).
fn tps_execute(q: &Mutex<TpsQueue>) -> (bool, usize) {
    let task = {
        let mut q = q.lock().expect("taskprocessor lock");
        match q.tasks.pop_front() {
            Some(t) => {
                q.executing = true;
                t
            }
            None => return (false, 0),
        }
    };
    task();
    let mut q = q.lock().expect("taskprocessor lock");
    q.executing = false;
    (true, q.tasks.len())
}

enum Mgmt {
    TaskPushed { was_empty: bool },
    Emptied,
    WorkerIdle(usize),
    Stop,
}

/// The control taskprocessor: a queue, a semaphore posted on every push, one thread.
struct Control {
    queue: Mutex<VecDeque<Box<Mgmt>>>,
    sem: Mutex<u64>,
    sem_cond: Condvar,
}

impl Control {
    fn push(&self, m: Mgmt) {
        // Asterisk allocates the management data and the taskprocessor's task node per push.
        self.queue
            .lock()
            .expect("control lock")
            .push_back(Box::new(m));
        let mut count = self.sem.lock().expect("semaphore lock");
        *count += 1;
        self.sem_cond.notify_one();
    }

    fn wait(&self) -> Box<Mgmt> {
        let mut count = self.sem.lock().expect("semaphore lock");
        while *count == 0 {
            count = self.sem_cond.wait(count).expect("semaphore wait");
        }
        *count -= 1;
        drop(count);
        self.queue
            .lock()
            .expect("control lock")
            .pop_front()
            .expect("semaphore counts queued management tasks")
    }
}

struct WorkerState {
    alive: bool,
    wake_up: bool,
}

struct Worker {
    lock: Mutex<WorkerState>,
    cond: Condvar,
}

struct PoolState {
    shutting_down: bool,
    idle: Vec<usize>,
    active: Vec<usize>,
}

struct PoolInner {
    pool: Mutex<PoolState>,
    tps: Mutex<TpsQueue>,
    control: Control,
    workers: Vec<Worker>,
}

impl PoolInner {
    fn push(&self, task: Task) {
        let st = self.pool.lock().expect("pool lock");
        if st.shutting_down {
            return;
        }
        let was_empty = self.tps.lock().expect("taskprocessor lock").push(task);
        // The taskprocessor listener's task_pushed callback, still under the pool lock.
        self.control.push(Mgmt::TaskPushed { was_empty });
        drop(st);
    }

    fn activate(&self, st: &mut PoolState, id: usize) {
        st.active.push(id);
        let w = &self.workers[id];
        let mut ws = w.lock.lock().expect("worker lock");
        ws.wake_up = true;
        w.cond.notify_one();
    }
}

fn control_main(inner: Arc<PoolInner>) {
    loop {
        let m = inner.control.wait();
        let mut st = inner.pool.lock().expect("pool lock");
        match *m {
            Mgmt::TaskPushed { was_empty } => {
                // Every idle worker becomes active (Asterisk passes `was_empty` on to the pool's
                // listener; this replica has none).
                let _ = was_empty;
                let idle = std::mem::take(&mut st.idle);
                for id in idle {
                    inner.activate(&mut st, id);
                }
            }
            Mgmt::Emptied => {}
            Mgmt::WorkerIdle(id) => {
                if let Some(pos) = st.active.iter().position(|&a| a == id) {
                    st.active.swap_remove(pos);
                }
                st.idle.push(id);
            }
            Mgmt::Stop => return,
        }
    }
}

fn worker_main(inner: Arc<PoolInner>, id: usize) {
    let w = &inner.workers[id];
    let mut ws = w.lock.lock().expect("worker lock");
    loop {
        // worker_idle: wait until activated, then consume the wake-up (Asterisk clears
        // `wake_up` after waiting, so an activation that came before the wait is not lost).
        while ws.alive && !ws.wake_up {
            ws = w.cond.wait(ws).expect("worker wait");
        }
        ws.wake_up = false;
        if !ws.alive {
            return;
        }
        drop(ws);
        // worker_active: run tasks while alive and the shared queue has some.
        loop {
            if !w.lock.lock().expect("worker lock").alive {
                break;
            }
            if inner.pool.lock().expect("pool lock").shutting_down {
                break;
            }
            let (ran, size) = tps_execute(&inner.tps);
            if ran && size == 0 {
                inner.control.push(Mgmt::Emptied);
            }
            if !ran || size == 0 {
                break;
            }
        }
        ws = w.lock.lock().expect("worker lock");
        if !ws.alive {
            return;
        }
        inner.control.push(Mgmt::WorkerIdle(id));
    }
}

/// The replica pool: `workers` threads sharing one queue, plus the control thread.
pub struct ThreadPool {
    inner: Arc<PoolInner>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl ThreadPool {
    pub fn new(workers: usize) -> ThreadPool {
        let inner = Arc::new(PoolInner {
            pool: Mutex::new(PoolState {
                shutting_down: false,
                idle: (0..workers).collect(),
                active: Vec::new(),
            }),
            tps: Mutex::new(TpsQueue::new()),
            control: Control {
                queue: Mutex::new(VecDeque::new()),
                sem: Mutex::new(0),
                sem_cond: Condvar::new(),
            },
            workers: (0..workers)
                .map(|_| Worker {
                    lock: Mutex::new(WorkerState {
                        alive: true,
                        wake_up: false,
                    }),
                    cond: Condvar::new(),
                })
                .collect(),
        });
        let mut handles = Vec::new();
        let control = Arc::clone(&inner);
        handles.push(
            std::thread::Builder::new()
                .name("threadpool-control".into())
                .spawn(move || control_main(control))
                .expect("spawn threadpool control thread"),
        );
        for id in 0..workers {
            let inner = Arc::clone(&inner);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("threadpool-{id}"))
                    .spawn(move || worker_main(inner, id))
                    .expect("spawn threadpool worker"),
            );
        }
        ThreadPool {
            inner,
            handles: Mutex::new(handles),
        }
    }

    pub fn push<F: FnOnce() + Send + 'static>(&self, task: F) {
        self.inner.push(Box::new(task));
    }

    pub fn serializer(&self) -> TpSerializer {
        TpSerializer {
            inner: Arc::new(SerializerInner {
                pool: Arc::clone(&self.inner),
                tps: Mutex::new(TpsQueue::new()),
            }),
        }
    }

    /// Stops the workers and the control thread and waits for them; tasks still queued are
    /// dropped.
    pub fn stop_and_join(&self) {
        self.inner.pool.lock().expect("pool lock").shutting_down = true;
        for w in &self.inner.workers {
            let mut ws = w.lock.lock().expect("worker lock");
            ws.alive = false;
            ws.wake_up = true;
            w.cond.notify_one();
        }
        self.inner.control.push(Mgmt::Stop);
        let handles = std::mem::take(&mut *self.handles.lock().expect("handles lock"));
        for h in handles {
            let _ = h.join();
        }
    }
}

struct SerializerInner {
    pool: Arc<PoolInner>,
    tps: Mutex<TpsQueue>,
}

/// The replica's serializer (`ast_threadpool_serializer`).
#[derive(Clone)]
pub struct TpSerializer {
    inner: Arc<SerializerInner>,
}

impl TpSerializer {
    pub fn push<F: FnOnce() + Send + 'static>(&self, task: F) {
        let was_empty = self
            .inner
            .tps
            .lock()
            .expect("serializer lock")
            .push(Box::new(task));
        if was_empty {
            let ser = Arc::clone(&self.inner);
            self.inner.pool.push(Box::new(move || {
                // execute_tasks: run the serializer's tasks until it is empty.
                while let (true, size) = tps_execute(&ser.tps) {
                    if size == 0 {
                        break;
                    }
                }
            }));
        }
    }
}
