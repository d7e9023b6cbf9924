def send_file_frames(
    sock_fd: int, file_fd: int, log_offset: int, file_pos: int, total: int, batch: int, timeout_s: float
) -> int: ...

class LogFeed:
    @property
    def end(self) -> int: ...
    def publish(self, end: int) -> None: ...
    def stop(self) -> None: ...

def push_file(
    feed: LogFeed,
    sock_fd: int,
    file_fd: int,
    next: int,
    file_base: int,
    file_limit: int,
    batch: int,
    idle_s: float,
    timeout_s: float,
) -> int: ...

FRAMES: int
IDLE: int
CLOSED: int
WRONG_OFFSET: int
BAD_SIZE: int

def recv_frames(
    sock_fd: int, buf: bytearray, filled: int, pos: int, expected: int, report: int, timeout_s: float
) -> tuple[int, int, int, int]: ...
def join_frames(buf: bytearray, pos: int, whole: int) -> tuple[int, int, int]: ...
