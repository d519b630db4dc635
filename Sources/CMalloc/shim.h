// glibc's malloc extensions (malloc_trim), for returning freed heap pages to the kernel.
#include <malloc.h>
