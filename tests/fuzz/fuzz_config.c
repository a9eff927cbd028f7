/* libFuzzer: the YAML configuration loader. */
#include <stdint.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_config c;
    char err[512];
    pt_config_defaults(&c);
    pt_config_load_yaml(&c, (const char *)data, size, err, sizeof(err));
    pt_config_free(&c);
    return 0;
}
