--- Modal's gRPC messages as cseng.protobuf schemas: only the messages and fields the Modal adapter
--- (lua/providers/modal.lua) sends or reads. A helper module beside the adapters, not a provider.
---
--- Field numbers, types and labels are facts of Modal's protos (Apache-2.0, in
--- ../shared/specs/modal/modal_proto/; not copied here): spec/providers/modal/schema_spec.lua compiles those
--- protos with protoc and checks every field below (number, type, label, referenced type) against
--- the descriptor set, decoded with cseng.protobuf itself. Fields left out are skipped when decoding
--- (unknown fields) and never sent.
---
--- Format (docs/ENGINE.md, cseng.protobuf): message = {name=, fields={{number, name, [label,] type,
--- [ref | key type, value type [, value ref]]}}}; enum = {name=, values={NAME=n}}.
local M = {}

local function enum(name, values) return { name = name, values = values } end
local function msg(name) return { name = name, fields = {} } end -- filled below (refs are tables)

-- ---- enums ----
M.ObjectCreationType = enum('modal.client.ObjectCreationType', {
  OBJECT_CREATION_TYPE_UNSPECIFIED = 0, OBJECT_CREATION_TYPE_CREATE_IF_MISSING = 1,
  OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS = 2, OBJECT_CREATION_TYPE_CREATE_OVERWRITE_IF_EXISTS = 3,
  OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP = 4, OBJECT_CREATION_TYPE_EPHEMERAL = 5,
})
M.GenericStatus = enum('modal.client.GenericResult.GenericStatus', {
  GENERIC_STATUS_UNSPECIFIED = 0, GENERIC_STATUS_SUCCESS = 1, GENERIC_STATUS_FAILURE = 2,
  GENERIC_STATUS_TERMINATED = 3, GENERIC_STATUS_TIMEOUT = 4, GENERIC_STATUS_INIT_FAILURE = 5,
  GENERIC_STATUS_INTERNAL_FAILURE = 6, GENERIC_STATUS_IDLE_TIMEOUT = 7, GENERIC_STATUS_MEMORY_MANAGER_EVICTION = 8,
})
M.FileDescriptor = enum('modal.client.FileDescriptor', {
  FILE_DESCRIPTOR_UNSPECIFIED = 0, FILE_DESCRIPTOR_STDOUT = 1, FILE_DESCRIPTOR_STDERR = 2, FILE_DESCRIPTOR_INFO = 3,
})
M.NetworkAccessType = enum('modal.client.NetworkAccess.NetworkAccessType', {
  UNSPECIFIED = 0, OPEN = 1, BLOCKED = 2, ALLOWLIST = 3,
})
M.TaskExecStdoutConfig = enum('modal.task_command_router.TaskExecStdoutConfig', {
  TASK_EXEC_STDOUT_CONFIG_DEVNULL = 0, TASK_EXEC_STDOUT_CONFIG_PIPE = 1,
})
M.TaskExecStderrConfig = enum('modal.task_command_router.TaskExecStderrConfig', {
  TASK_EXEC_STDERR_CONFIG_DEVNULL = 0, TASK_EXEC_STDERR_CONFIG_PIPE = 1, TASK_EXEC_STDERR_CONFIG_STDOUT = 2,
})
M.TaskExecStdioFileDescriptor = enum('modal.task_command_router.TaskExecStdioFileDescriptor', {
  TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT = 0, TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR = 1,
})

-- ---- modal.client (control plane) ----
local C = 'modal.client.'
for _, n in ipairs({
  'GenericResult', 'AuthTokenGetRequest', 'AuthTokenGetResponse', 'EnvironmentGetOrCreateRequest',
  'EnvironmentGetOrCreateResponse', 'EnvironmentMetadata', 'EnvironmentSettings', 'AppGetOrCreateRequest',
  'AppGetOrCreateResponse', 'BaseImage', 'ImageContextFile', 'Image', 'ImageGetOrCreateRequest',
  'ImageGetOrCreateResponse', 'ImageJoinStreamingRequest', 'ImageJoinStreamingResponse', 'TaskLogs',
  'Resources', 'SchedulerPlacement', 'NetworkAccess', 'StringMap', 'Sandbox', 'SandboxTag',
  'SandboxCreateRequest', 'SandboxCreateResponse', 'SandboxGetTaskIdRequest', 'SandboxGetTaskIdResponse',
  'TaskGetCommandRouterAccessRequest', 'TaskGetCommandRouterAccessResponse', 'SandboxTerminateRequest',
  'SandboxTerminateResponse', 'SandboxListRequest', 'SandboxListResponse', 'SandboxInfo',
  'SandboxSnapshotFsRequest', 'SandboxSnapshotFsResponse', 'SandboxWaitRequest', 'SandboxWaitResponse',
  'MountFile', 'MountGetOrCreateRequest', 'MountGetOrCreateResponse', 'MountPutFileRequest', 'MountPutFileResponse',
}) do M[n] = msg(C .. n) end

M.GenericResult.fields = {
  { 1, 'status', 'enum', M.GenericStatus }, { 2, 'exception', 'string' }, { 3, 'exitcode', 'int32' },
  { 4, 'traceback', 'string' },
}
M.AuthTokenGetResponse.fields = { { 1, 'token', 'string' } }
M.EnvironmentGetOrCreateRequest.fields = {
  { 1, 'deployment_name', 'string' }, { 2, 'object_creation_type', 'enum', M.ObjectCreationType },
}
M.EnvironmentGetOrCreateResponse.fields = { { 1, 'environment_id', 'string' }, { 2, 'metadata', 'message', M.EnvironmentMetadata } }
M.EnvironmentMetadata.fields = { { 1, 'name', 'string' }, { 2, 'settings', 'message', M.EnvironmentSettings } }
M.EnvironmentSettings.fields = { { 1, 'image_builder_version', 'string' }, { 2, 'webhook_suffix', 'string' } }
M.AppGetOrCreateRequest.fields = {
  { 1, 'app_name', 'string' }, { 2, 'environment_name', 'string' },
  { 3, 'object_creation_type', 'enum', M.ObjectCreationType },
}
M.AppGetOrCreateResponse.fields = { { 1, 'app_id', 'string' } }
M.BaseImage.fields = { { 1, 'image_id', 'string' }, { 2, 'docker_tag', 'string' } }
M.ImageContextFile.fields = { { 1, 'filename', 'string' }, { 2, 'data', 'bytes' } }
M.Image.fields = {
  { 5, 'base_images', 'repeated', 'message', M.BaseImage }, { 6, 'dockerfile_commands', 'repeated', 'string' },
  { 7, 'context_files', 'repeated', 'message', M.ImageContextFile }, { 15, 'context_mount_id', 'string' },
}
M.MountFile.fields = {
  { 1, 'filename', 'string' }, { 3, 'sha256_hex', 'string' }, { 4, 'size', 'optional', 'uint64' },
  { 5, 'mode', 'optional', 'uint32' },
}
M.MountGetOrCreateRequest.fields = {
  { 3, 'environment_name', 'string' }, { 4, 'object_creation_type', 'enum', M.ObjectCreationType },
  { 5, 'files', 'repeated', 'message', M.MountFile }, { 6, 'app_id', 'string' },
}
M.MountGetOrCreateResponse.fields = { { 1, 'mount_id', 'string' } }
M.MountPutFileRequest.fields = { { 2, 'sha256_hex', 'string' }, { 3, 'data', 'bytes', oneof = 'data_oneof' } }
M.MountPutFileResponse.fields = { { 2, 'exists', 'bool' } }
M.ImageGetOrCreateRequest.fields = {
  { 2, 'image', 'message', M.Image }, { 4, 'app_id', 'string' }, { 7, 'force_build', 'bool' },
  { 9, 'builder_version', 'string' },
}
M.ImageGetOrCreateResponse.fields = { { 1, 'image_id', 'string' }, { 2, 'result', 'message', M.GenericResult } }
M.ImageJoinStreamingRequest.fields = {
  { 1, 'image_id', 'string' }, { 2, 'timeout', 'float' }, { 3, 'last_entry_id', 'string' },
  { 4, 'include_logs_for_finished', 'bool' },
}
M.TaskLogs.fields = { { 1, 'data', 'string' }, { 8, 'file_descriptor', 'enum', M.FileDescriptor } }
M.ImageJoinStreamingResponse.fields = {
  { 1, 'result', 'message', M.GenericResult }, { 2, 'task_logs', 'repeated', 'message', M.TaskLogs },
  { 3, 'entry_id', 'string' }, { 4, 'eof', 'bool' },
}
M.Resources.fields = {
  { 2, 'memory_mb', 'uint32' }, { 3, 'milli_cpu', 'uint32' }, { 5, 'memory_mb_max', 'uint32' },
  { 7, 'milli_cpu_max', 'uint32' },
}
M.SchedulerPlacement.fields = { { 4, 'regions', 'repeated', 'string' } }
M.NetworkAccess.fields = {
  { 1, 'network_access_type', 'enum', M.NetworkAccessType }, { 2, 'allowed_cidrs', 'repeated', 'string' },
}
M.StringMap.fields = { { 1, 'contents', 'map', 'string', 'string' } }
M.Sandbox.fields = {
  { 1, 'entrypoint_args', 'repeated', 'string' }, { 3, 'image_id', 'string' },
  { 5, 'resources', 'message', M.Resources }, { 7, 'timeout_secs', 'uint32' },
  { 8, 'workdir', 'optional', 'string' }, { 17, 'scheduler_placement', 'optional', 'message', M.SchedulerPlacement },
  { 22, 'network_access', 'message', M.NetworkAccess }, { 26, 'cloud_provider_str', 'string' },
  { 29, 'verbose', 'bool' }, { 40, 'environment_variables', 'message', M.StringMap },
}
M.SandboxTag.fields = { { 1, 'tag_name', 'string' }, { 2, 'tag_value', 'string' } }
M.SandboxCreateRequest.fields = {
  { 1, 'app_id', 'string' }, { 2, 'definition', 'message', M.Sandbox },
  { 4, 'tags', 'repeated', 'message', M.SandboxTag },
}
M.SandboxCreateResponse.fields = { { 1, 'sandbox_id', 'string' } }
M.SandboxGetTaskIdRequest.fields = {
  { 1, 'sandbox_id', 'string' }, { 2, 'timeout', 'optional', 'float' }, { 3, 'wait_until_ready', 'bool' },
}
M.SandboxGetTaskIdResponse.fields = {
  { 1, 'task_id', 'optional', 'string' }, { 2, 'task_result', 'optional', 'message', M.GenericResult },
}
M.TaskGetCommandRouterAccessRequest.fields = { { 1, 'task_id', 'string' } }
M.TaskGetCommandRouterAccessResponse.fields = { { 1, 'jwt', 'string' }, { 2, 'url', 'string' } }
M.SandboxTerminateRequest.fields = { { 1, 'sandbox_id', 'string' } }
M.SandboxTerminateResponse.fields = { { 1, 'existing_result', 'message', M.GenericResult } }
M.SandboxListRequest.fields = {
  { 1, 'app_id', 'string' }, { 2, 'before_timestamp', 'double' }, { 3, 'environment_name', 'string' },
  { 4, 'include_finished', 'bool' }, { 5, 'tags', 'repeated', 'message', M.SandboxTag },
}
M.SandboxInfo.fields = {
  { 1, 'id', 'string' }, { 3, 'created_at', 'double' }, { 5, 'app_id', 'string' },
  { 6, 'tags', 'repeated', 'message', M.SandboxTag }, { 8, 'image_id', 'string' },
}
M.SandboxListResponse.fields = { { 1, 'sandboxes', 'repeated', 'message', M.SandboxInfo } }
M.SandboxSnapshotFsRequest.fields = { { 1, 'sandbox_id', 'string' }, { 2, 'timeout', 'float' } }
M.SandboxSnapshotFsResponse.fields = { { 1, 'image_id', 'string' }, { 2, 'result', 'message', M.GenericResult } }
M.SandboxWaitRequest.fields = { { 1, 'sandbox_id', 'string' }, { 2, 'timeout', 'float' } }
M.SandboxWaitResponse.fields = { { 1, 'result', 'message', M.GenericResult } }

-- ---- modal.task_command_router (per task, on the router URL) ----
local R = 'modal.task_command_router.'
for _, n in ipairs({
  'TaskExecStartRequest', 'TaskExecStartResponse', 'TaskExecStdioReadRequest', 'TaskExecStdioReadResponse',
  'TaskExecWaitRequest', 'TaskExecWaitResponse', 'TaskExecStdinWriteRequest', 'TaskExecStdinWriteResponse',
}) do M[n] = msg(R .. n) end

M.TaskExecStartRequest.fields = {
  { 1, 'task_id', 'string' }, { 2, 'exec_id', 'string' }, { 3, 'command_args', 'repeated', 'string' },
  { 4, 'stdout_config', 'enum', M.TaskExecStdoutConfig }, { 5, 'stderr_config', 'enum', M.TaskExecStderrConfig },
  { 6, 'timeout_secs', 'optional', 'uint32' }, { 7, 'workdir', 'optional', 'string' },
  { 12, 'env', 'map', 'string', 'string' },
}
M.TaskExecStdioReadRequest.fields = {
  { 1, 'task_id', 'string' }, { 2, 'exec_id', 'string' }, { 3, 'offset', 'uint64' },
  { 4, 'file_descriptor', 'enum', M.TaskExecStdioFileDescriptor },
}
M.TaskExecStdioReadResponse.fields = { { 1, 'data', 'bytes' } }
M.TaskExecWaitRequest.fields = { { 1, 'task_id', 'string' }, { 2, 'exec_id', 'string' } }
M.TaskExecWaitResponse.fields = {
  { 1, 'code', 'int32', oneof = 'exit_status' }, { 2, 'signal', 'int32', oneof = 'exit_status' },
}
M.TaskExecStdinWriteRequest.fields = {
  { 1, 'task_id', 'string' }, { 2, 'exec_id', 'string' }, { 3, 'offset', 'uint64' }, { 4, 'data', 'bytes' },
  { 5, 'eof', 'bool' },
}

--- The gRPC methods the adapter calls: service, request and response schemas, and whether the
--- response is a server stream.
local CLIENT, ROUTER = 'modal.client.ModalClient', 'modal.task_command_router.TaskCommandRouter'
M.methods = {}
for _, m in ipairs {
  { CLIENT, 'AuthTokenGet' },
  { CLIENT, 'EnvironmentGetOrCreate' },
  { CLIENT, 'AppGetOrCreate' },
  { CLIENT, 'ImageGetOrCreate' },
  { CLIENT, 'ImageJoinStreaming', stream = true },
  { CLIENT, 'SandboxCreate' },
  { CLIENT, 'SandboxGetTaskId' },
  { CLIENT, 'TaskGetCommandRouterAccess' },
  { CLIENT, 'SandboxTerminate' },
  { CLIENT, 'SandboxList' },
  { CLIENT, 'SandboxSnapshotFs' },
  { CLIENT, 'SandboxWait' },
  { CLIENT, 'MountPutFile' },
  { CLIENT, 'MountGetOrCreate' },
  { ROUTER, 'TaskExecStart' },
  { ROUTER, 'TaskExecStdioRead', stream = true },
  { ROUTER, 'TaskExecWait' },
  { ROUTER, 'TaskExecStdinWrite' },
} do
  M.methods[m[2]] = { m[1], assert(M[m[2] .. 'Request']), assert(M[m[2] .. 'Response']), stream = m.stream }
end
M.AuthTokenGetRequest.fields = {}
M.TaskExecStartResponse.fields = {}
M.TaskExecStdinWriteResponse.fields = {}

return M
