kd_add_test(test_proto_frame SOURCES test_proto_frame.c LIBS kd_protocol LABELS unit)
kd_add_test(test_proto_writer SOURCES test_proto_writer.c LIBS kd_protocol LABELS unit)
kd_add_test(test_proto_decode SOURCES test_proto_decode.c LIBS kd_protocol LABELS unit)
